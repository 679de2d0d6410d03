// Command holdfast-reporter reports a node's holdfast agent to Kubernetes: it
// reads the agent's GET /report and keeps the node condition HoldfastPinned
// and Events on the Node; it watches the workloads for the images the node
// needs, sends them to the agent (PUT /required) and keeps the node condition
// HoldfastImagesReady and the node's NodeImages object (what it holds, for
// holdfast check --cluster); it sends the agent the ImageSets (PUT /sets),
// and one reporter, elected, writes their status. It is its own binary so that holdfast itself
// never loads client-go's clientset and informers.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/term"
	"k8s.io/klog/v2"

	"github.com/holdfast-project/holdfast/internal/build"
	"github.com/holdfast-project/holdfast/internal/datadir"
	"github.com/holdfast-project/holdfast/internal/reporter"
)

// version and commit are set at build time with -ldflags
// "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  string
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := pflag.NewFlagSet("holdfast-reporter", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	agent := fs.String("agent", envOr("HOLDFAST_AGENT", "http://127.0.0.1:9747"), "base URL of the holdfast agent's HTTP server (env HOLDFAST_AGENT)")
	tokenFile := fs.String("token-file", envOr("HOLDFAST_TOKEN_FILE", datadir.At(datadir.System).Token()), "the agent's token (the file of its --token-file), which the agent asks of PUT /required; read again when the agent answers 401 (env HOLDFAST_TOKEN_FILE)")
	node := fs.String("node", os.Getenv("NODE_NAME"), "name of this node; required (env NODE_NAME, from the downward API's spec.nodeName)")
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig for running outside a pod; empty: the in-cluster config (env KUBECONFIG)")
	interval := fs.Duration("interval", 10*time.Second, "how often the agent's report is read (env HOLDFAST_REPORT_INTERVAL)")
	requiredImages := fs.Bool("required", true, "watch the images the node's workloads need, send them to the agent and keep the condition "+
		string(reporter.ImagesConditionType)+" and the node's NodeImages (env HOLDFAST_REQUIRED)")
	clusterWorkloads := fs.Bool("cluster-workloads", true, "with --required, also every workload of the cluster that may run on the node, "+
		"not only the Pods bound to it (env HOLDFAST_CLUSTER_WORKLOADS)")
	imageSets := fs.Bool("imagesets", false, "with --required, watch the ImageSets and every node's NodeImages, send the agent the sets and "+
		"which of their images the node may pull now (PUT /sets, the waves), and write where they stand into the node's NodeImages (env HOLDFAST_IMAGESETS)")
	leaderElect := fs.Bool("leader-elect", false, "with --imagesets, stand for election (a Lease) among the reporters: the leader writes each ImageSet's status (env HOLDFAST_LEADER_ELECT)")
	leaseName := fs.String("lease-name", "holdfast-imagesets", "the Lease of the election (env HOLDFAST_LEASE_NAME)")
	leaseNamespace := fs.String("lease-namespace", os.Getenv("POD_NAMESPACE"), "the Lease's namespace; required with --leader-elect (env POD_NAMESPACE)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		_, _ = fmt.Fprintf(stderr, "Usage: holdfast-reporter [flags]\n\nKeeps the node conditions %s and %s and Events on the Node in line with the holdfast agent's /report,\n"+
			"and sends the agent the images the node's workloads need.\n\n%s",
			reporter.ConditionType, reporter.ImagesConditionType, fs.FlagUsages())
	}
	for _, ef := range [][2]string{{"HOLDFAST_REPORT_INTERVAL", "interval"}, {"HOLDFAST_REQUIRED", "required"}, {"HOLDFAST_CLUSTER_WORKLOADS", "cluster-workloads"},
		{"HOLDFAST_IMAGESETS", "imagesets"}, {"HOLDFAST_LEADER_ELECT", "leader-elect"}, {"HOLDFAST_LEASE_NAME", "lease-name"}} {
		if v := os.Getenv(ef[0]); v != "" {
			if err := fs.Set(ef[1], v); err != nil {
				_, _ = fmt.Fprintf(stderr, "holdfast-reporter: %s=%q: %v\n", ef[0], v, err)
				return 2
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *showVersion {
		if err := build.Read("holdfast-reporter", version, commit).WriteText(os.Stdout); err != nil {
			return 1
		}
		return 0
	}
	log := logger(stderr)
	klog.SetSlogLogger(log) // client-go's informers log through klog
	if *node == "" {
		log.Error("no node named: set --node or NODE_NAME (from the downward API's spec.nodeName)")
		return 2
	}
	if *interval <= 0 {
		log.Error("--interval must be positive", "interval", *interval)
		return 2
	}
	if *imageSets && !*requiredImages {
		log.Error("--imagesets needs --required: the node's NodeImages, which the waves and the statuses read, is written with it")
		return 2
	}
	var lease *reporter.Lease
	if *leaderElect && *imageSets {
		if *leaseName == "" || *leaseNamespace == "" {
			log.Error("--leader-elect needs --lease-name and --lease-namespace (or POD_NAMESPACE)")
			return 2
		}
		lease = &reporter.Lease{Name: *leaseName, Namespace: *leaseNamespace}
	}
	client, dyn, err := reporter.Clients(*kubeconfig, "holdfast-reporter/"+version)
	if err != nil {
		log.Error("connecting to the API server", "error", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Info("reporting", "node", *node, "agent", *agent, "tokenFile", *tokenFile, "interval", interval.String(), "required", *requiredImages,
		"clusterWorkloads", *clusterWorkloads, "imageSets", *imageSets, "leaderElect", lease != nil, "version", version)
	r := reporter.New(client, reporter.Config{Agent: *agent, Node: *node, Interval: *interval, Log: log, TokenFile: *tokenFile,
		Required: *requiredImages, ClusterWorkloads: *clusterWorkloads, ImageSets: *imageSets, Dynamic: dyn, Leader: lease})
	if err := r.Run(ctx); err != nil {
		log.Error("reporting", "error", err)
		return 1
	}
	log.Info("stopping")
	return 0
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// logger logs JSON, or text on a terminal.
func logger(w io.Writer) *slog.Logger {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return slog.New(slog.NewTextHandler(w, nil))
	}
	return slog.New(slog.NewJSONHandler(w, nil))
}

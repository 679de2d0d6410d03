package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/kubeapi"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/workload"
)

// CheckReport is `holdfast check -o json`.
type CheckReport struct {
	Images []CheckImage `json:"images"`
	// Sandbox is the pod sandbox image, as containerd's CRI reports it or
	// --sandbox-image gives it; empty when neither says.
	Sandbox string   `json:"sandbox,omitempty"`
	Errors  []string `json:"errors,omitempty"`
}

// CheckImage is one image in `holdfast check -o json`.
type CheckImage struct {
	Ref    string         `json:"ref"`
	State  workload.State `json:"state"`
	Target string         `json:"target,omitempty"`
	Others []string       `json:"others,omitempty"`
	UsedBy []string       `json:"usedBy"`
}

func newCheck(o *options) *cobra.Command {
	var (
		files          []string
		output         string
		allowUnpinned  bool
		sandboxImage   string
		withoutSandbox bool
		cluster        bool
		kube           kubeapi.Options
		selector       string
	)
	cmd := &cobra.Command{
		Use:   "check [FILE...]",
		Short: "Say which images the given workloads need that this node lacks, or holds unpinned",
		Long: `check reads Kubernetes manifests (multi-document YAML or JSON, Lists, the output
of helm template or kubectl get -o yaml) or plain lines of image references, from
the files given (- or none: standard input), and collects every image a pod could
run: the containers, init containers and ephemeral containers of Pods,
Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs, CronJobs,
ReplicationControllers and PodTemplates, and the pod templates found in any other
object (said at debug level). The node's pod sandbox (pause) image is added: as
containerd's CRI reports it (containerd 1.x), else as --sandbox-image gives it.

Each image is then looked up in this node's containerd as the kubelet would
find it (names normalized: nginx is docker.io/library/nginx:latest; a digest
reference by its repo@sha256:... record):

  pinned    a record of that name, pinned: the kubelet's image GC keeps it
  present   a record, not pinned: the kubelet's image GC may delete it
  missing   no record: the kubelet would pull it, and an air-gapped node cannot
  mismatch  a digest reference whose repository the node holds at other
            digests only

With --cluster, check asks the cluster instead of this node's containerd (the
kubeconfig found as kubectl finds it: --kubeconfig, $KUBECONFIG, ~/.kube/config,
else the pod's service account). Each node's holdfast reporter keeps a NodeImages
object: what the node holds, and where the images its workloads need stand.
Without manifests, check --cluster prints, node by node, the images the node's
workloads need that are not pinned there, and the nodes with no report. With
manifests (-f), it judges their images on every node they may run on (by their
nodeName, nodeSelector and required node affinity against the node's labels)
against what the node holds: "if I apply these, which nodes lack which image?".
The sandbox image is not judged across the cluster.

Exit status: 0 when every image is pinned (with --allow-unpinned, present is
enough; with --cluster, on every node, and every node has a report), 1
otherwise, 2 on bad usage or bad input: a document that does not parse is named
(FILE: document N) and the others are still checked.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "table" && output != "json" {
				return &usageError{fmt.Errorf("-o %q: want table or json", output)}
			}
			files = append(files, args...)
			if cluster {
				return checkCluster(cmd, o, files, kube, selector, output, allowUnpinned)
			}
			if len(files) == 0 {
				files = []string{"-"}
			}
			set := readSet(cmd, o, files)
			ctx := cmd.Context()
			s, err := o.openReader(ctx, "check")
			if err != nil {
				return err
			}
			defer s.close()
			sandbox := sandboxImage
			if sandbox == "" && !withoutSandbox {
				sandbox, err = s.rt.SandboxImage(ctx)
				if err != nil && !errors.Is(err, runtime.ErrNoCRI) {
					return err
				}
				if sandbox == "" {
					o.log.Warn("containerd's CRI does not say which sandbox (pause) image it runs pods with (containerd 2.x); give it with --sandbox-image to check it too")
				}
			}
			records, err := s.rt.Records(ctx)
			if err != nil {
				return err
			}
			return checkNode(cmd, set, records, sandbox, output, allowUnpinned)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&files, "filename", "f", nil, "a manifest file, or - for standard input; repeatable (files may also be given as arguments)")
	f.StringVarP(&output, "output", "o", "table", "table or json")
	f.BoolVar(&allowUnpinned, "allow-unpinned", false, "exit 0 when every image is at least present, pinned or not")
	f.StringVar(&sandboxImage, "sandbox-image", "", "the pod sandbox (pause) image to check; default: what containerd's CRI reports (containerd 1.x)")
	f.BoolVar(&withoutSandbox, "no-sandbox-image", false, "do not check the pod sandbox image")
	f.BoolVar(&cluster, "cluster", false, "check every node of the cluster from its NodeImages, not this node's containerd; manifests are optional")
	f.StringVar(&kube.Kubeconfig, "kubeconfig", "", "with --cluster: the kubeconfig file; default $KUBECONFIG, else ~/.kube/config, else the pod's service account")
	f.StringVar(&kube.Context, "context", "", "with --cluster: the kubeconfig context; default its current-context")
	f.StringVarP(&selector, "selector", "l", "", "with --cluster: only the nodes this label selector matches (node-role.kubernetes.io/worker, zone=a)")
	return cmd
}

// checkNode judges set and the sandbox image (empty: none) against the
// node's records, writes the report and returns the exit status.
func checkNode(cmd *cobra.Command, set *workload.Set, records []runtime.Image, sandbox, output string, allowUnpinned bool) error {
	report := CheckReport{Sandbox: sandbox}
	if sandbox != "" {
		set.Add(sandbox, workload.Use{File: "the pod sandbox image"})
	}
	failed := judgeCheck(&report, set, records, allowUnpinned)
	report.Errors = sayErrors(cmd, set.Errors)
	return finishCheck(cmd, output, report, func(w io.Writer) error { return writeCheck(w, report) }, len(set.Errors) > 0, failed)
}

// judgeCheck puts into report where each image of set stands among
// records, and says whether the check failed: an image not pinned (with
// allowUnpinned, not present).
func judgeCheck(report *CheckReport, set *workload.Set, records []runtime.Image, allowUnpinned bool) (failed bool) {
	report.Images = []CheckImage{}
	for _, v := range workload.Judge(set.Images(), records) {
		ci := CheckImage{Ref: v.Ref, State: v.State, Target: v.Target, Others: v.Others, UsedBy: []string{}}
		for _, u := range v.Uses {
			ci.UsedBy = append(ci.UsedBy, u.String())
		}
		report.Images = append(report.Images, ci)
		if v.State != workload.Pinned && (!allowUnpinned || v.State != workload.Present) {
			failed = true
		}
	}
	return failed
}

// readSet reads the manifests of files into a set.
func readSet(cmd *cobra.Command, o *options, files []string) *workload.Set {
	var set workload.Set
	for _, f := range files {
		data, err := readInput(f, cmd.InOrStdin())
		if err != nil {
			set.Errors = append(set.Errors, err)
			continue
		}
		set.Read(f, data)
	}
	for _, n := range set.Notes {
		o.log.Debug("found a pod spec in an object of a kind holdfast does not know", "where", n)
	}
	return &set
}

// checkCluster is check --cluster: files, when there are any, are the
// manifests to judge on every node.
func checkCluster(cmd *cobra.Command, o *options, files []string, kube kubeapi.Options, selector, output string, allowUnpinned bool) error {
	var set *workload.Set
	if len(files) > 0 {
		set = readSet(cmd, o, files)
	}
	kube.UserAgent = "holdfast-check"
	c, err := kubeapi.Connect(kube)
	if err != nil {
		return err
	}
	o.log.Debug("reading the cluster", "server", c.Server(), "from", c.Source())
	nodes, reports, notes, err := readCluster(cmd.Context(), c, selector)
	if err != nil {
		return err
	}
	for _, n := range notes {
		o.log.Warn(n)
	}
	report, errs := judgeCluster(nodes, reports, set, allowUnpinned)
	var inputErrs []error
	if set != nil {
		inputErrs = set.Errors
	}
	report.Errors = sayErrors(cmd, append(slices.Clone(inputErrs), errs...))
	return finishCheck(cmd, output, report, func(w io.Writer) error { return writeCluster(w, report) }, len(inputErrs) > 0, clusterFailed(report))
}

// sayErrors says each error on standard error, and returns them for the
// JSON report.
func sayErrors(cmd *cobra.Command, errs []error) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
		fmt.Fprintf(cmd.ErrOrStderr(), "error: %v\n", e)
	}
	return out
}

// finishCheck writes report as JSON or as table writes it, and exits 2
// after bad input, 1 when the check failed.
func finishCheck(cmd *cobra.Command, output string, report any, table func(io.Writer) error, badInput, failed bool) error {
	var err error
	if output == "json" {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		err = enc.Encode(report)
	} else {
		err = table(cmd.OutOrStdout())
	}
	switch {
	case err != nil:
		return err
	case badInput:
		return &ExitError{Code: 2}
	case failed:
		return &ExitError{Code: 1}
	}
	return nil
}

// readInput reads a file, or standard input for "-".
func readInput(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		data, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading standard input: %w", err)
		}
		return data, nil
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return data, nil
}

func writeCheck(w io.Writer, r CheckReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tSTATE\tUSED BY")
	counts := map[workload.State]int{}
	for _, img := range r.Images {
		counts[img.State]++
		used := "-"
		if len(img.UsedBy) > 0 {
			used = img.UsedBy[0]
			if n := len(img.UsedBy) - 1; n > 0 {
				used += fmt.Sprintf(" (and %d more)", n)
			}
		}
		state := string(img.State)
		if img.State == workload.Mismatch {
			state += " (holds " + strings.Join(shortDigests(img.Others), ", ") + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", img.Ref, state, used)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d images: %d pinned, %d present, %d missing, %d mismatch\n", len(r.Images),
		counts[workload.Pinned], counts[workload.Present], counts[workload.Missing], counts[workload.Mismatch])
	return err
}

func shortDigests(ds []string) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = shortDigest(d)
	}
	return out
}

// shortDigest is the first 12 hex digits of a sha256 digest, as tables show
// image IDs.
func shortDigest(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	if len(d) > 12 {
		d = d[:12]
	}
	return d
}

package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/flagenv"
	"github.com/holdfast-project/holdfast/internal/kubeapi"
	"github.com/holdfast-project/holdfast/internal/kubelet"
	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/units"
	"github.com/holdfast-project/holdfast/internal/workload"
)

// CheckReport is `holdfast check -o json`.
type CheckReport struct {
	Images []report.Image `json:"images"`
	// Sandbox is the pod sandbox image, as containerd's CRI reports it or
	// --sandbox-image gives it; empty when neither says.
	Sandbox string `json:"sandbox,omitempty"`
	// Kubelet is the kubelet configuration read (--kubelet-config, else
	// the distribution's), nil when none was.
	Kubelet *kubelet.Config `json:"kubelet,omitempty"`
	// SharedDigests are the images the kubelet would pull under a name
	// this node does not hold although it holds their digest under others,
	// which it would then verify (kubelet.SharedDigests).
	SharedDigests []kubelet.SharedDigest `json:"sharedDigests,omitempty"`
	Errors        []string               `json:"errors,omitempty"`
}

// checkFlags are check's flags.
type checkFlags struct {
	files          []string
	output         string
	allowUnpinned  bool
	sandboxImage   string
	withoutSandbox bool
	cluster        bool
	kubeletConfig  []string
	kube           kubeapi.Options
	selector       string
}

func newCheck(o *options) *cobra.Command {
	var c checkFlags
	cmd := &cobra.Command{
		Use:   "check [FILE...]",
		Short: "Say which images the given workloads need that this node lacks, or holds unpinned",
		Long:  checkLong,
		RunE: func(cmd *cobra.Command, args []string) error {
			if c.output != "table" && c.output != "json" {
				return &usageError{fmt.Errorf("-o %q: want table or json", c.output)}
			}
			c.files = append(c.files, args...)
			if c.cluster {
				return checkCluster(cmd, o, c)
			}
			return checkHere(cmd, o, c)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&c.files, "filename", "f", nil, "a manifest file, or - for standard input; repeatable (files may also be given as arguments)")
	f.StringVarP(&c.output, "output", "o", "table", "table or json")
	f.BoolVar(&c.allowUnpinned, "allow-unpinned", false, "exit 0 when every image is at least present, pinned or not")
	f.StringVar(&c.sandboxImage, "sandbox-image", "", "the pod sandbox (pause) image to check; default: what containerd's CRI reports (containerd 1.x)")
	f.BoolVar(&c.withoutSandbox, "no-sandbox-image", false, "do not check the pod sandbox image")
	f.BoolVar(&c.cluster, "cluster", false, "check every node of the cluster from its NodeImages, not this node's containerd; manifests are optional")
	f.StringArrayVar(&c.kubeletConfig, "kubelet-config", nil, "the node's kubelet configuration: a file, or a directory of *.conf drop-ins; repeatable, merged in order as the kubelet merges --config and --config-dir. check warns of each held image the kubelet would pull again to verify its pull credentials (imagePullCredentialsVerificationPolicy). Default: the first there of /var/lib/rancher/k3s/agent/etc/kubelet.conf.d (K3s), /var/lib/rancher/rke2/agent/etc/kubelet.conf.d (RKE2), /var/lib/kubelet/config.yaml (kubeadm); with --cluster, none, and one given is taken as every node's")
	flagenv.Allow(f, "kubelet-config")
	f.StringVar(&c.kube.Kubeconfig, "kubeconfig", "", "with --cluster: the kubeconfig file; default $KUBECONFIG, else ~/.kube/config, else the pod's service account")
	f.StringVar(&c.kube.Context, "context", "", "with --cluster: the kubeconfig context; default its current-context")
	f.StringVarP(&c.selector, "selector", "l", "", "with --cluster: only the nodes this label selector matches (node-role.kubernetes.io/worker, zone=a)")
	return cmd
}

// checkHere is check on this node: files (none: standard input) against
// its containerd's records.
func checkHere(cmd *cobra.Command, o *options, c checkFlags) error {
	files := c.files
	if len(files) == 0 {
		files = []string{"-"}
	}
	set := readSet(cmd, o, files)
	kc := readKubelet(o, c.kubeletConfig, set)
	ctx := cmd.Context()
	s, err := o.openReader(ctx, "check")
	if err != nil {
		return err
	}
	defer s.close()
	sandbox := c.sandboxImage
	if sandbox == "" && !c.withoutSandbox {
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
	return checkNode(cmd, set, records, sandbox, kc, c.output, c.allowUnpinned)
}

// readKubelet reads the kubelet configuration of paths, else the
// distribution's that is on this machine; nil when there is none. One that
// cannot be read is an error of set's input.
// A distribution's that this user may not read is said, and not judged.
func readKubelet(o *options, paths []string, set *workload.Set) *kubelet.Config {
	found := false
	if len(paths) == 0 {
		if paths = kubelet.Find("/"); paths == nil {
			o.log.Debug("no kubelet configuration found (--kubelet-config): the kubelet's pull credential verification is not judged")
			return nil
		}
		found = true
		o.log.Debug("reading the kubelet configuration", "path", paths[0])
	}
	kc, err := kubelet.Load(paths)
	switch {
	case err != nil && found && errors.Is(err, fs.ErrPermission):
		o.log.Warn("the kubelet's pull credential verification is not judged", "error", err)
		return nil
	case err != nil:
		set.Errors = append(set.Errors, err)
		return nil
	}
	return kc
}

// checkNode judges set and the sandbox image (empty: none) against the
// node's records and, when kc is not nil, the kubelet's configuration,
// writes the report and returns the exit status.
func checkNode(cmd *cobra.Command, set *workload.Set, records []runtime.Image, sandbox string, kc *kubelet.Config, output string, allowUnpinned bool) error {
	out := CheckReport{Sandbox: sandbox, Kubelet: kc}
	if sandbox != "" {
		set.Add(sandbox, workload.Use{File: "the pod sandbox image"})
	}
	var failed bool
	images := set.Images()
	out.Images, failed = workload.Check(images, records, allowUnpinned, kc.ForcedPull)
	out.SharedDigests = kc.SharedDigests(images, records)
	out.Errors = sayErrors(cmd, set.Errors)
	for _, img := range out.Images {
		if img.ForcedPull != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", img.ForcedPull.Message)
		}
	}
	for _, s := range out.SharedDigests {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", s.Message)
	}
	return finishCheck(cmd, output, out, func(w io.Writer) error { return writeCheck(w, out) }, len(set.Errors) > 0, failed)
}

// readSet reads the manifests of files into a set.
func readSet(cmd *cobra.Command, o *options, files []string) *workload.Set {
	set := workload.ReadFiles(files, cmd.InOrStdin())
	for _, n := range set.Notes {
		o.log.Debug("found a pod spec in an object of a kind holdfast does not know", "where", n)
	}
	return set
}

// checkCluster is check --cluster: files, when there are any, are the
// manifests to judge on every node.
func checkCluster(cmd *cobra.Command, o *options, f checkFlags) error {
	var set *workload.Set
	var kc *kubelet.Config
	if len(f.files) > 0 {
		set = readSet(cmd, o, f.files)
		if len(f.kubeletConfig) > 0 {
			kc = readKubelet(o, f.kubeletConfig, set)
		}
	} else if len(f.kubeletConfig) > 0 {
		o.log.Warn("--kubelet-config is judged with manifests (-f) only: the nodes' reports say no pull policies")
	}
	kube := f.kube
	kube.UserAgent = "holdfast-check"
	c, err := kubeapi.Connect(kube)
	if err != nil {
		return err
	}
	o.log.Debug("reading the cluster", "server", c.Server(), "from", c.Source())
	read, err := readCluster(cmd.Context(), c, f.selector)
	if err != nil {
		return err
	}
	for _, n := range read.notes {
		o.log.Warn(n)
	}
	report, errs := judgeCluster(read.nodes, read.reports, set, f.allowUnpinned)
	report.ImageSets = workload.JudgeSets(read.sets)
	var inputErrs []error
	if set != nil {
		inputErrs = set.Errors
	}
	report.Errors = sayErrors(cmd, append(slices.Clone(inputErrs), errs...))
	if kc != nil {
		report.Kubelet = kc
		report.ForcedPulls = report.Cluster.ForcedPulls(set, kc.ForcedPull)
		for _, fp := range report.ForcedPulls {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s (on %s)\n", fp.Message, nodeList(fp.Nodes))
		}
	}
	return finishCheck(cmd, f.output, report, func(w io.Writer) error { return writeCluster(w, report) }, len(inputErrs) > 0, clusterFailed(report))
}

// nodeList names up to five nodes, and counts the others.
func nodeList(nodes []string) string {
	if len(nodes) <= 5 {
		return strings.Join(nodes, ", ")
	}
	return units.List(nodes, 5) + " nodes"
}

// usedBy is the first of users, and how many others: "a (and 2 more)"; "-"
// for none.
func usedBy(users []string) string {
	switch len(users) {
	case 0:
		return "-"
	case 1:
		return users[0]
	}
	return users[0] + " (" + units.Rest(len(users)-1) + ")"
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

func writeCheck(w io.Writer, r CheckReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tSTATE\tUSED BY")
	counts := map[report.State]int{}
	for _, img := range r.Images {
		counts[img.State]++
		used := usedBy(img.UsedBy)
		state := string(img.State)
		if img.State == report.Mismatch {
			state += " (holds " + strings.Join(shortDigests(img.Others), ", ") + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", img.Ref, state, used)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d images: %d pinned, %d present, %d missing, %d mismatch\n", len(r.Images),
		counts[report.Pinned], counts[report.Present], counts[report.Missing], counts[report.Mismatch])
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

// checkLong is check's help.
const checkLong = `check reads Kubernetes manifests (multi-document YAML, JSON or a stream of JSON
objects, Lists, the output of helm template or kubectl get -o yaml, in UTF-8 or, by
its byte order mark, UTF-16) or plain lines of image references, from the files
given (- or none: standard input), as kubectl cuts them, and collects every image
a pod could run: the containers, init containers, ephemeral containers and image
volumes of Pods, Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs,
CronJobs, ReplicationControllers and PodTemplates, and the pod templates found in
any other object (said at debug level). The node's pod sandbox (pause) image is
added: as containerd's CRI reports it (containerd 1.x), else as --sandbox-image
gives it.

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

check --cluster then shows each ImageSet's progress as its status says (the
leader among the reporters writes it): Staged and why, how many of the selected
nodes are staged and how many failed, the first images missing with the nodes
that lack them, and the first failed pulls; a status written before the spec
last changed, or none at all, is said to be not yet aggregated (is a reporter
elected?). The sets do not change the exit status: kubectl wait
--for=condition=Staged imageset/NAME waits for one.

With the node's kubelet configuration (--kubelet-config, else K3s's, RKE2's or
kubeadm's when there), check warns of each image the node holds that the kubelet
would pull again anyway: imagePullCredentialsVerificationPolicy AlwaysVerify, or
NeverVerifyAllowlistedImages without the image in
preloadedImagesVerificationAllowlist, has it verify the pull credentials of
images it did not pull itself, as it did not pull what holdfast imports; with
imagePullPolicy IfNotPresent it pulls (which fails without a registry), with
Never it refuses to start the container. It also warns of an image a workload
asks for under a name this node does not hold as holdfast's while holdfast holds
its digest under another (a digest reference, or a record not holdfast's), when
the kubelet would pull it (IfNotPresent or Always): once the kubelet has pulled an
image under one name, NeverVerifyPreloadedImages (the default, assumed when no
configuration is read) has it verify the pull credentials of the image's other
names, and refuse them to pods without (kubernetes#138175). The warnings do not
change the exit status.

Exit status: 0 when every image is pinned (with --allow-unpinned, present is
enough; with --cluster, on every node, and every node has a report), 1
otherwise, 2 on bad usage or bad input: a document that is not understood is
named (FILE:LINE: document N) and the others are still checked; a kubelet
configuration that does not parse is named.`

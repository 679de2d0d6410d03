package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/kubeapi"
	"github.com/holdfast-project/holdfast/internal/kubelet"
	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/workload"
)

// CheckReport is `holdfast check -o json`.
type CheckReport struct {
	Images []CheckImage `json:"images"`
	// Sandbox is the pod sandbox image, as containerd's CRI reports it or
	// --sandbox-image gives it; empty when neither says.
	Sandbox string `json:"sandbox,omitempty"`
	// Kubelet is the kubelet configuration read (--kubelet-config, else
	// the distribution's), nil when none was.
	Kubelet *kubelet.Config `json:"kubelet,omitempty"`
	Errors  []string        `json:"errors,omitempty"`
}

// CheckImage is one image in `holdfast check -o json`.
type CheckImage struct {
	Ref    string       `json:"ref"`
	State  report.State `json:"state"`
	Target string       `json:"target,omitempty"`
	Others []string     `json:"others,omitempty"`
	UsedBy []string     `json:"usedBy"`
	// ForcedPull says the kubelet would pull the image although the node
	// holds it: its configuration has it verify the pull credentials of
	// images it did not pull itself.
	ForcedPull *ForcedPull `json:"forcedPull,omitempty"`
}

// ForcedPull is why the kubelet would pull an image the node holds, and
// what to change.
type ForcedPull struct {
	// Policy is the kubelet's imagePullCredentialsVerificationPolicy
	// (AlwaysVerify, NeverVerifyAllowlistedImages); From the file that sets
	// it.
	Policy string `json:"policy"`
	From   string `json:"from,omitempty"`
	// PullPolicies are those of the uses concerned: IfNotPresent (the
	// kubelet pulls, which fails where no registry answers), Never (it
	// refuses to start the container: ErrImageNeverPull).
	PullPolicies []string `json:"pullPolicies"`
	UsedBy       []string `json:"usedBy"`
	// Allowlist are the entries of preloadedImagesVerificationAllowlist
	// that would exempt it: the names as the uses write them, without tag
	// or digest.
	Allowlist []string `json:"allowlist"`
	Message   string   `json:"message"`
}

func newCheck(o *options) *cobra.Command {
	var (
		files          []string
		output         string
		allowUnpinned  bool
		sandboxImage   string
		withoutSandbox bool
		cluster        bool
		kubeletConfig  []string
		kube           kubeapi.Options
		selector       string
	)
	cmd := &cobra.Command{
		Use:   "check [FILE...]",
		Short: "Say which images the given workloads need that this node lacks, or holds unpinned",
		Long: `check reads Kubernetes manifests (multi-document YAML, JSON or a stream of JSON
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

With the node's kubelet configuration (--kubelet-config, else K3s's, RKE2's or
kubeadm's when there), check warns of each image the node holds that the kubelet
would pull again anyway: imagePullCredentialsVerificationPolicy AlwaysVerify, or
NeverVerifyAllowlistedImages without the image in
preloadedImagesVerificationAllowlist, has it verify the pull credentials of
images it did not pull itself, as it did not pull what holdfast imports; with
imagePullPolicy IfNotPresent it pulls (which fails without a registry), with
Never it refuses to start the container. The warnings do not change the exit
status.

Exit status: 0 when every image is pinned (with --allow-unpinned, present is
enough; with --cluster, on every node, and every node has a report), 1
otherwise, 2 on bad usage or bad input: a document that is not understood is
named (FILE:LINE: document N) and the others are still checked; a kubelet
configuration that does not parse is named.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "table" && output != "json" {
				return &usageError{fmt.Errorf("-o %q: want table or json", output)}
			}
			files = append(files, args...)
			if cluster {
				return checkCluster(cmd, o, files, kubeletConfig, kube, selector, output, allowUnpinned)
			}
			if len(files) == 0 {
				files = []string{"-"}
			}
			set := readSet(cmd, o, files)
			kc := readKubelet(o, kubeletConfig, set)
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
			return checkNode(cmd, set, records, sandbox, kc, output, allowUnpinned)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&files, "filename", "f", nil, "a manifest file, or - for standard input; repeatable (files may also be given as arguments)")
	f.StringVarP(&output, "output", "o", "table", "table or json")
	f.BoolVar(&allowUnpinned, "allow-unpinned", false, "exit 0 when every image is at least present, pinned or not")
	f.StringVar(&sandboxImage, "sandbox-image", "", "the pod sandbox (pause) image to check; default: what containerd's CRI reports (containerd 1.x)")
	f.BoolVar(&withoutSandbox, "no-sandbox-image", false, "do not check the pod sandbox image")
	f.BoolVar(&cluster, "cluster", false, "check every node of the cluster from its NodeImages, not this node's containerd; manifests are optional")
	f.StringArrayVar(&kubeletConfig, "kubelet-config", nil, "the node's kubelet configuration: a file, or a directory of *.conf drop-ins; repeatable, merged in order as the kubelet merges --config and --config-dir. check warns of each held image the kubelet would pull again to verify its pull credentials (imagePullCredentialsVerificationPolicy). Default: the first there of /var/lib/rancher/k3s/agent/etc/kubelet.conf.d (K3s), /var/lib/rancher/rke2/agent/etc/kubelet.conf.d (RKE2), /var/lib/kubelet/config.yaml (kubeadm); with --cluster, none, and one given is taken as every node's")
	withEnv(f, "kubelet-config")
	f.StringVar(&kube.Kubeconfig, "kubeconfig", "", "with --cluster: the kubeconfig file; default $KUBECONFIG, else ~/.kube/config, else the pod's service account")
	f.StringVar(&kube.Context, "context", "", "with --cluster: the kubeconfig context; default its current-context")
	f.StringVarP(&selector, "selector", "l", "", "with --cluster: only the nodes this label selector matches (node-role.kubernetes.io/worker, zone=a)")
	return cmd
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
	failed := judgeCheck(&out, set, records, kc, allowUnpinned)
	out.Errors = sayErrors(cmd, set.Errors)
	for _, img := range out.Images {
		if img.ForcedPull != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", img.ForcedPull.Message)
		}
	}
	return finishCheck(cmd, output, out, func(w io.Writer) error { return writeCheck(w, out) }, len(set.Errors) > 0, failed)
}

// judgeCheck puts into out where each image of set stands among records,
// and what of the held ones kc would have the kubelet pull; it says whether
// the check failed: an image not ready (workload.Ready). A forced pull does
// not fail it.
func judgeCheck(out *CheckReport, set *workload.Set, records []runtime.Image, kc *kubelet.Config, allowUnpinned bool) (failed bool) {
	out.Images = []CheckImage{}
	for _, v := range workload.Judge(set.Images(), records) {
		ci := CheckImage{Ref: v.Ref, State: v.State, Target: v.Target, Others: v.Others, UsedBy: []string{}}
		for _, u := range v.Uses {
			ci.UsedBy = append(ci.UsedBy, u.String())
		}
		if v.State == report.Pinned || v.State == report.Present {
			ci.ForcedPull = forcedPull(kc, v.Image)
		}
		out.Images = append(out.Images, ci)
		if !workload.Ready(v.State, allowUnpinned) {
			failed = true
		}
	}
	return failed
}

// forcedPull says why kc would have the kubelet pull img, which the node
// holds, for the uses whose pull policy lets it (IfNotPresent, Never); nil
// when it would not, or kc is nil.
func forcedPull(kc *kubelet.Config, img workload.Image) *ForcedPull {
	if kc == nil {
		return nil
	}
	var f ForcedPull
	for _, u := range img.Uses {
		if !kc.ForcesPull(u.Image, u.PullPolicy) {
			continue
		}
		f.UsedBy = append(f.UsedBy, u.String())
		if !slices.Contains(f.PullPolicies, u.PullPolicy) {
			f.PullPolicies = append(f.PullPolicies, u.PullPolicy)
		}
		if name := kubelet.AllowlistName(u.Image); !slices.Contains(f.Allowlist, name) {
			f.Allowlist = append(f.Allowlist, name)
		}
	}
	if f.UsedBy == nil {
		return nil
	}
	slices.Sort(f.PullPolicies)
	f.Policy, f.From = kc.Policy, kc.PolicyFrom
	var what string
	switch {
	case !slices.Contains(f.PullPolicies, "Never"):
		what = "the kubelet would pull it although this node holds it (imagePullPolicy IfNotPresent), which fails where no registry answers"
	case !slices.Contains(f.PullPolicies, "IfNotPresent"):
		what = "the kubelet would refuse to start it although this node holds it (imagePullPolicy Never: ErrImageNeverPull)"
	default:
		what = "the kubelet would pull it although this node holds it (imagePullPolicy IfNotPresent), which fails where no registry answers, or refuse to start it (Never: ErrImageNeverPull)"
	}
	why := fmt.Sprintf("imagePullCredentialsVerificationPolicy %s in %s has it verify the pull credentials of every image it did not pull itself, as it did not pull what holdfast imports", f.Policy, f.From)
	if f.Policy == kubelet.NeverVerifyAllowlistedImages {
		why = fmt.Sprintf("imagePullCredentialsVerificationPolicy %s in %s has it verify the pull credentials of images it did not pull itself unless preloadedImagesVerificationAllowlist names them, and it names no %s", f.Policy, f.From, strings.Join(f.Allowlist, ", "))
	}
	used := f.UsedBy[0]
	if n := len(f.UsedBy) - 1; n > 0 {
		used += fmt.Sprintf(" and %d more", n)
	}
	f.Message = fmt.Sprintf("%s: %s: %s (used by %s); add %s to preloadedImagesVerificationAllowlist with %s, or set %s",
		img.Ref, what, why, used, strings.Join(f.Allowlist, ", "), kubelet.NeverVerifyAllowlistedImages, kubelet.NeverVerifyPreloadedImages)
	return &f
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
func checkCluster(cmd *cobra.Command, o *options, files, kubeletConfig []string, kube kubeapi.Options, selector, output string, allowUnpinned bool) error {
	var set *workload.Set
	var kc *kubelet.Config
	if len(files) > 0 {
		set = readSet(cmd, o, files)
		if len(kubeletConfig) > 0 {
			kc = readKubelet(o, kubeletConfig, set)
		}
	} else if len(kubeletConfig) > 0 {
		o.log.Warn("--kubelet-config is judged with manifests (-f) only: the nodes' reports say no pull policies")
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
	if kc != nil {
		report.Kubelet = kc
		report.ForcedPulls = clusterForcedPulls(report, set, kc)
		for _, f := range report.ForcedPulls {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s (on %s)\n", f.Message, nodeList(f.Nodes))
		}
	}
	return finishCheck(cmd, output, report, func(w io.Writer) error { return writeCluster(w, report) }, len(inputErrs) > 0, clusterFailed(report))
}

// nodeList names up to five nodes, and counts the others.
func nodeList(nodes []string) string {
	if len(nodes) <= 5 {
		return strings.Join(nodes, ", ")
	}
	return fmt.Sprintf("%s and %d more nodes", strings.Join(nodes[:5], ", "), len(nodes)-5)
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
	counts := map[report.State]int{}
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

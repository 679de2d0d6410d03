package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/holdfast-project/holdfast/internal/imageset"
	"github.com/holdfast-project/holdfast/internal/kubeapi"
	"github.com/holdfast-project/holdfast/internal/kubelet"
	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/units"
	"github.com/holdfast-project/holdfast/internal/workload"
)

// ClusterReport is `holdfast check --cluster -o json`: the cluster's
// verdict (workload.JudgeCluster), the kubelet's advice, and each
// ImageSet's progress (workload.JudgeSets).
type ClusterReport struct {
	workload.Cluster
	// Kubelet is the kubelet configuration given (--kubelet-config), taken
	// as every node's; ForcedPulls the images of the manifests it would
	// have the kubelet pull again on the nodes that hold them.
	Kubelet     *kubelet.Config              `json:"kubelet,omitempty"`
	ForcedPulls []workload.ClusterForcedPull `json:"forcedPulls,omitempty"`
	// ImageSets are the cluster's ImageSets, by name, as their status
	// says: they do not change the exit status.
	ImageSets []workload.ClusterSet `json:"imageSets"`
	Errors    []string              `json:"errors,omitempty"`
}

// clusterRead is what check --cluster reads of the cluster.
type clusterRead struct {
	nodes   []kubeapi.Node
	reports map[string]report.NodeImages // by node name
	sets    []imageset.ImageSet
	notes   []string // what the user should hear of what could not be read
}

// readCluster lists the Nodes (those selector matches), the NodeImages
// objects and the ImageSets. A cluster without the NodeImages resource (the
// chart's requiredImages off) is no error, nor are ImageSets that cannot be
// read: notes say so.
func readCluster(ctx context.Context, c *kubeapi.Client, selector string) (clusterRead, error) {
	var r clusterRead
	var err error
	if r.nodes, err = c.Nodes(ctx, selector); err != nil {
		return r, fmt.Errorf("listing the Nodes of %s: %w", c.Server(), err)
	}
	r.reports = map[string]report.NodeImages{}
	list, bad, err := c.NodeImages(ctx)
	switch {
	case kubeapi.IsNotFound(err):
		r.notes = append(r.notes, "the cluster has no NodeImages resource (holdfast's chart installs it with requiredImages.enabled): only the nodes' conditions speak")
	case err != nil:
		return r, fmt.Errorf("listing the NodeImages of %s: %w", c.Server(), err)
	}
	for _, e := range bad {
		r.notes = append(r.notes, fmt.Sprintf("a NodeImages object that does not decode: %v", e))
	}
	for _, ni := range list {
		r.reports[ni.Metadata.Name] = ni
	}
	r.sets, bad, err = c.ImageSets(ctx)
	if err != nil {
		r.notes = append(r.notes, fmt.Sprintf("listing the ImageSets of %s: %v: their progress is not shown", c.Server(), err))
	}
	for _, e := range bad {
		r.notes = append(r.notes, fmt.Sprintf("an ImageSet that does not decode: %v", e))
	}
	return r, nil
}

// judgeCluster is workload.JudgeCluster of the Nodes and NodeImages read.
func judgeCluster(nodes []kubeapi.Node, reports map[string]report.NodeImages, set *workload.Set, allowUnpinned bool) (ClusterReport, []error) {
	in := make([]workload.Node, len(nodes))
	for i, n := range nodes {
		in[i] = workload.Node{Name: n.Name, Labels: n.Labels}
		for _, c := range n.Status.Conditions {
			if c.Type == report.ImagesConditionType {
				in[i].Condition = &workload.ClusterCondition{Status: c.Status, Reason: c.Reason, Message: c.Message}
			}
		}
	}
	cluster, errs := workload.JudgeCluster(in, reports, set, allowUnpinned)
	return ClusterReport{Cluster: cluster}, errs
}

// writeCluster writes the nodes × images not ready, then the nodes that
// have no report, then the totals.
func writeCluster(w io.Writer, r ClusterReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tIMAGE\tSTATE\tUSED BY")
	for _, n := range r.Nodes {
		for _, img := range n.NotReady {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n.Name, img.Ref, img.State, usedBy(img.UsedBy))
		}
		if n.Cut > 0 {
			fmt.Fprintf(tw, "%s\t(%d more not listed by the node's report)\t\t\n", n.Name, n.Cut)
		}
		if !n.Report {
			why := "no report: no holdfast reporter on the node, or it has not written its NodeImages yet"
			if n.Condition != nil {
				why = fmt.Sprintf("no report; %s %s %s: %s", report.ImagesConditionType, n.Condition.Status, n.Condition.Reason, firstLine(n.Condition.Message))
			}
			fmt.Fprintf(tw, "%s\t-\tunknown\t%s\n", n.Name, why)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	t := r.Totals
	if _, err := fmt.Fprintf(w, "%d nodes: %d ready, %d lacking images (%d missing, %d unpinned), %d without a report\n",
		t.Nodes, t.Ready, t.Lacking, t.Missing, t.Unpinned, t.NoReport); err != nil {
		return err
	}
	if len(r.Nowhere) > 0 {
		if _, err := fmt.Fprintf(w, "%d missing images no node holds (no peer can serve them: carry them in an archive): %s\n",
			len(r.Nowhere), strings.Join(r.Nowhere, ", ")); err != nil {
			return err
		}
	}
	for _, s := range r.ImageSets {
		if err := writeSet(w, s); err != nil {
			return err
		}
	}
	return nil
}

// shownOfSet is how many missing images, and how many failures, check
// --cluster lists of a set; the JSON has what the status lists.
const shownOfSet = 5

// writeSet writes a set's progress: its Staged condition and node counts,
// the first images missing with the first nodes that lack them, the first
// failures, and whether its status speaks of its spec as it is.
func writeSet(w io.Writer, s workload.ClusterSet) error {
	if s.Staged == nil {
		_, err := fmt.Fprintf(w, "ImageSet %s (%d images): %s\n", s.Name, s.Images, s.Note)
		return err
	}
	fmt.Fprintf(w, "ImageSet %s (%d images): Staged %s (%s), nodes %d staged of %d selected, %d failed; %d images missing\n",
		s.Name, s.Images, s.Staged.Status, s.Staged.Reason, s.Nodes.Staged, s.Nodes.Selected, s.Nodes.Failed, s.MissingImages)
	if s.Note != "" {
		fmt.Fprintf(w, "  %s\n", s.Note)
	}
	if p := s.Progressing; p != nil && p.Status == imageset.True {
		fmt.Fprintf(w, "  Progressing (%s): %s\n", p.Reason, firstLine(p.Message))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, m := range s.Missing[:min(len(s.Missing), shownOfSet)] {
		shown := min(len(m.NodeNames), 3)
		fmt.Fprintf(tw, "  missing\t%s\ton %d nodes: %s\n", m.Image, m.Nodes, strings.Join(m.NodeNames[:shown], ", ")+units.More(m.Nodes-shown))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if more := s.MissingImages - min(len(s.Missing), shownOfSet); more > 0 {
		fmt.Fprintf(w, "  missing  (%s images)\n", units.Rest(more))
	}
	for _, f := range s.Failures[:min(len(s.Failures), shownOfSet)] {
		fmt.Fprintf(tw, "  failed\t%s\t%s: %s\n", f.Node, f.Image, firstLine(f.Error))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if more := s.FailureCount - min(len(s.Failures), shownOfSet); more > 0 {
		_, err := fmt.Fprintf(w, "  failed  (%s failures)\n", units.Rest(more))
		return err
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// clusterFailed says whether check --cluster exits 1: a node lacks an
// image, or has no report.
func clusterFailed(r ClusterReport) bool {
	return slices.ContainsFunc(r.Nodes, func(n workload.ClusterNode) bool { return !n.Ready })
}

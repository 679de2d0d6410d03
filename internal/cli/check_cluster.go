package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/holdfast-project/holdfast/internal/kubeapi"
	"github.com/holdfast-project/holdfast/internal/kubelet"
	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/workload"
)

// ClusterReport is `holdfast check --cluster -o json`: the cluster's
// verdict (workload.JudgeCluster), and the kubelet's advice.
type ClusterReport struct {
	workload.Cluster
	// Kubelet is the kubelet configuration given (--kubelet-config), taken
	// as every node's; ForcedPulls the images of the manifests it would
	// have the kubelet pull again on the nodes that hold them.
	Kubelet     *kubelet.Config              `json:"kubelet,omitempty"`
	ForcedPulls []workload.ClusterForcedPull `json:"forcedPulls,omitempty"`
	Errors      []string                     `json:"errors,omitempty"`
}

// readCluster lists the Nodes (those selector matches) and the NodeImages
// objects. A cluster without the NodeImages resource (the chart's
// requiredImages off) is no error: notes say so.
func readCluster(ctx context.Context, c *kubeapi.Client, selector string) ([]kubeapi.Node, map[string]report.NodeImages, []string, error) {
	nodes, err := c.Nodes(ctx, selector)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("listing the Nodes of %s: %w", c.Server(), err)
	}
	var notes []string
	reports := map[string]report.NodeImages{}
	list, bad, err := c.NodeImages(ctx)
	switch {
	case kubeapi.IsNotFound(err):
		notes = append(notes, "the cluster has no NodeImages resource (holdfast's chart installs it with requiredImages.enabled): only the nodes' conditions speak")
	case err != nil:
		return nil, nil, nil, fmt.Errorf("listing the NodeImages of %s: %w", c.Server(), err)
	}
	for _, e := range bad {
		notes = append(notes, fmt.Sprintf("a NodeImages object that does not decode: %v", e))
	}
	for _, ni := range list {
		reports[ni.Metadata.Name] = ni
	}
	return nodes, reports, notes, nil
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
		_, err := fmt.Fprintf(w, "%d missing images no node holds (no peer can serve them: carry them in an archive): %s\n",
			len(r.Nowhere), strings.Join(r.Nowhere, ", "))
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

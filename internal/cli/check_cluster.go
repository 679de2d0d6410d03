package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/kubeapi"
	"github.com/holdfast-project/holdfast/internal/kubelet"
	"github.com/holdfast-project/holdfast/internal/required"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/workload"
)

// ClusterReport is `holdfast check --cluster -o json`.
type ClusterReport struct {
	// Manifests says whether the images judged are those of the manifests
	// given (-f), not those each node's reporter watches.
	Manifests bool          `json:"manifests"`
	Nodes     []ClusterNode `json:"nodes"`
	Totals    ClusterTotals `json:"totals"`
	// Kubelet is the kubelet configuration given (--kubelet-config), taken
	// as every node's; ForcedPulls the images of the manifests it would
	// have the kubelet pull again on the nodes that hold them.
	Kubelet     *kubelet.Config     `json:"kubelet,omitempty"`
	ForcedPulls []ClusterForcedPull `json:"forcedPulls,omitempty"`
	Errors      []string            `json:"errors,omitempty"`
}

// ClusterForcedPull is an image the kubelet would pull again although
// nodes hold it.
type ClusterForcedPull struct {
	Ref string `json:"ref"`
	ForcedPull
	// Nodes are the nodes that hold it (pinned or present) and may run
	// its pods, sorted.
	Nodes []string `json:"nodes"`
}

// ClusterNode is one node in `holdfast check --cluster -o json`.
type ClusterNode struct {
	Name string `json:"name"`
	// Condition is the Node's HoldfastImagesReady condition: status,
	// reason, message; empty when the Node has none.
	Condition *ClusterCondition `json:"condition,omitempty"`
	// Report says whether the node's NodeImages object was there to read:
	// without it, -f cannot be judged on the node, and without -f only the
	// condition speaks.
	Report  bool       `json:"report"`
	Updated *time.Time `json:"updated,omitempty"`
	Held    int        `json:"held"` // image records the node holds
	// Ready: every image judged on the node is pinned (--allow-unpinned:
	// present). A node without a report is not ready.
	Ready  bool           `json:"ready"`
	Counts map[string]int `json:"counts"`
	// NotReady are the images judged that are not pinned, sorted; Cut
	// counts those the node's report left out of its list.
	NotReady []ClusterImage `json:"notReady"`
	Cut      int            `json:"cut,omitempty"`

	held []string // of the manifests' images, those the node holds
}

// ClusterCondition is a Node's HoldfastImagesReady condition.
type ClusterCondition struct {
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// ClusterImage is an image not ready on a node.
type ClusterImage struct {
	Ref    string   `json:"ref"`
	State  string   `json:"state"`
	UsedBy []string `json:"usedBy,omitempty"`
}

// ClusterTotals sums the nodes up.
type ClusterTotals struct {
	Nodes    int `json:"nodes"`
	Ready    int `json:"ready"`
	Lacking  int `json:"lacking"`  // nodes with an image missing, mismatched or unpinned
	NoReport int `json:"noReport"` // nodes without a NodeImages object
	// Missing and Unpinned count node × image pairs; Mismatch is in Missing.
	Missing  int `json:"missing"`
	Unpinned int `json:"unpinned"`
}

// clusterNode is what holdfast reads of a Node.
type clusterNode struct {
	Metadata struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Status struct {
		Conditions []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"conditions"`
	} `json:"status"`
}

// imagesConditionType is the reporter's condition (kube.ImagesConditionType:
// holdfast does not import the reporter's package, which loads client-go).
const imagesConditionType = "HoldfastImagesReady"

// readCluster lists the Nodes (those selector matches) and the NodeImages
// objects. A cluster without the NodeImages resource (the chart's
// requiredImages off) is no error: notes say so.
func readCluster(ctx context.Context, c *kubeapi.Client, selector string) ([]clusterNode, map[string]required.NodeImages, []string, error) {
	path := "/api/v1/nodes"
	if selector != "" {
		path += "?labelSelector=" + url.QueryEscape(selector)
	}
	var nodes []clusterNode
	err := c.List(ctx, path, func(item json.RawMessage) error {
		var n clusterNode
		if err := json.Unmarshal(item, &n); err != nil {
			return fmt.Errorf("decoding a Node: %w", err)
		}
		nodes = append(nodes, n)
		return nil
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("listing the Nodes of %s: %w", c.Server(), err)
	}
	var notes []string
	reports := map[string]required.NodeImages{}
	err = c.List(ctx, required.NodeImagesPath, func(item json.RawMessage) error {
		var ni required.NodeImages
		if err := json.Unmarshal(item, &ni); err != nil {
			notes = append(notes, fmt.Sprintf("a NodeImages object that does not decode: %v", err))
			return nil
		}
		reports[ni.Metadata.Name] = ni
		return nil
	})
	switch {
	case kubeapi.IsNotFound(err):
		notes = append(notes, "the cluster has no NodeImages resource (holdfast's chart installs it with requiredImages.enabled): only the nodes' conditions speak")
	case err != nil:
		return nil, nil, nil, fmt.Errorf("listing the NodeImages of %s: %w", c.Server(), err)
	}
	return nodes, reports, notes, nil
}

// judgeCluster says, node by node, which images are not ready: with set,
// those of its images that may run on the node, judged against what the
// node's report says it holds; without, what the node's report says of the
// images its reporter watches.
func judgeCluster(nodes []clusterNode, reports map[string]required.NodeImages, set *workload.Set, allowUnpinned bool) (ClusterReport, []error) {
	out := ClusterReport{Manifests: set != nil, Nodes: []ClusterNode{}}
	var errs []error
	var images []workload.Image
	if set != nil {
		images = set.Images()
	}
	memo := judgments{}
	for _, n := range nodes {
		cn := ClusterNode{Name: n.Metadata.Name, Counts: map[string]int{}, NotReady: []ClusterImage{}}
		for _, c := range n.Status.Conditions {
			if c.Type == imagesConditionType {
				cn.Condition = &ClusterCondition{Status: c.Status, Reason: c.Reason, Message: c.Message}
			}
		}
		ni, ok := reports[cn.Name]
		cn.Report = ok
		if ok {
			updated := ni.Updated
			cn.Updated, cn.Held = &updated, ni.Images
		}
		switch {
		case !ok:
		case set != nil:
			var here []workload.Image
			for _, img := range images {
				var uses []workload.Use
				for _, u := range img.Uses {
					if u.Placement.MayRunOn(cn.Name, n.Metadata.Labels) {
						uses = append(uses, u)
					}
				}
				if len(uses) > 0 {
					here = append(here, workload.Image{Ref: img.Ref, Uses: uses})
				}
			}
			verdicts, err := memo.judge(ni, here)
			if err != nil {
				errs = append(errs, fmt.Errorf("NodeImages %s: %w", cn.Name, err))
				cn.Report = false
				break
			}
			for _, v := range verdicts {
				cn.Counts[string(v.State)]++
				if v.State == workload.Pinned || v.State == workload.Present {
					cn.held = append(cn.held, v.Ref)
				}
				if v.State != workload.Pinned {
					ci := ClusterImage{Ref: v.Ref, State: string(v.State)}
					for _, u := range v.Uses {
						ci.UsedBy = append(ci.UsedBy, u.String())
					}
					cn.NotReady = append(cn.NotReady, ci)
				}
			}
		case ni.Required != nil && ni.Required.Known:
			shown := 0
			for st, k := range ni.Required.Counts {
				cn.Counts[st] = k
				if st != string(workload.Pinned) {
					shown += k
				}
			}
			for _, v := range ni.Required.NotReady {
				cn.NotReady = append(cn.NotReady, ClusterImage{Ref: v.Ref, State: v.State, UsedBy: v.UsedBy})
			}
			cn.Cut = shown - len(cn.NotReady)
		default:
			cn.Report = false // written before the agent had a set: it says nothing yet
		}
		lacking := cn.Counts[string(workload.Missing)] + cn.Counts[string(workload.Mismatch)]
		if !allowUnpinned {
			lacking += cn.Counts[string(workload.Present)]
		}
		cn.Ready = cn.Report && lacking == 0
		out.Totals.Nodes++
		switch {
		case !cn.Report:
			out.Totals.NoReport++
		case cn.Ready:
			out.Totals.Ready++
		default:
			out.Totals.Lacking++
		}
		out.Totals.Unpinned += cn.Counts[string(workload.Present)]
		out.Totals.Missing += cn.Counts[string(workload.Missing)] + cn.Counts[string(workload.Mismatch)]
		out.Nodes = append(out.Nodes, cn)
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Name < out.Nodes[j].Name })
	return out, errs
}

// clusterForcedPulls lists the images of set that kc would have the
// kubelet pull again, each with the nodes of r that hold it.
func clusterForcedPulls(r ClusterReport, set *workload.Set, kc *kubelet.Config) []ClusterForcedPull {
	nodes := map[string][]string{}
	for _, n := range r.Nodes {
		for _, ref := range n.held {
			nodes[ref] = append(nodes[ref], n.Name)
		}
	}
	var out []ClusterForcedPull
	for _, img := range set.Images() {
		if len(nodes[img.Ref]) == 0 {
			continue
		}
		if f := forcedPull(kc, img); f != nil {
			out = append(out, ClusterForcedPull{Ref: img.Ref, ForcedPull: *f, Nodes: nodes[img.Ref]})
		}
	}
	return out
}

// judgments remembers verdicts by what a node holds (its held hash) and
// which images may run there: the nodes of a pool hold the same, and are
// judged once.
type judgments map[string][]workload.Verdict

func (m judgments) judge(ni required.NodeImages, here []workload.Image) ([]workload.Verdict, error) {
	var key strings.Builder
	key.WriteString(ni.HeldHash)
	for _, img := range here {
		key.WriteString("\x00" + img.Ref)
		for _, u := range img.Uses {
			key.WriteString("\x01" + u.String())
		}
	}
	if v, ok := m[key.String()]; ok && ni.HeldHash != "" {
		return v, nil
	}
	held, err := required.Unpack(ni.Held)
	if err != nil {
		return nil, err
	}
	v := workload.Judge(here, heldRecords(held))
	m[key.String()] = v
	return v, nil
}

// heldRecords are the image records a node's report says it holds, as
// workload.Judge takes them.
func heldRecords(held required.Held) []runtime.Image {
	out := make([]runtime.Image, len(held))
	for i, h := range held {
		out[i] = runtime.Image{Name: h.Name, Target: ocispec.Descriptor{Digest: digest.Digest(h.Digest)}}
		if h.Pinned {
			out[i].Labels = map[string]string{runtime.LabelCRIPinned: runtime.PinnedValue}
		}
	}
	return out
}

// writeCluster writes the nodes × images not ready, then the nodes that
// have no report, then the totals.
func writeCluster(w io.Writer, r ClusterReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tIMAGE\tSTATE\tUSED BY")
	for _, n := range r.Nodes {
		for _, img := range n.NotReady {
			used := "-"
			if len(img.UsedBy) > 0 {
				used = img.UsedBy[0]
				if k := len(img.UsedBy) - 1; k > 0 {
					used += fmt.Sprintf(" (and %d more)", k)
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n.Name, img.Ref, img.State, used)
		}
		if n.Cut > 0 {
			fmt.Fprintf(tw, "%s\t(%d more not listed by the node's report)\t\t\n", n.Name, n.Cut)
		}
		if !n.Report {
			why := "no report: no holdfast reporter on the node, or it has not written its NodeImages yet"
			if n.Condition != nil {
				why = fmt.Sprintf("no report; %s %s %s: %s", imagesConditionType, n.Condition.Status, n.Condition.Reason, firstLine(n.Condition.Message))
			}
			fmt.Fprintf(tw, "%s\t-\tunknown\t%s\n", n.Name, why)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	t := r.Totals
	_, err := fmt.Fprintf(w, "%d nodes: %d ready, %d lacking images (%d missing, %d unpinned), %d without a report\n",
		t.Nodes, t.Ready, t.Lacking, t.Missing, t.Unpinned, t.NoReport)
	return err
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// clusterFailed says whether check --cluster exits 1: a node lacks an
// image, or has no report.
func clusterFailed(r ClusterReport) bool {
	return slices.ContainsFunc(r.Nodes, func(n ClusterNode) bool { return !n.Ready })
}

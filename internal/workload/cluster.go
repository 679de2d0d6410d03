package workload

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// Node is a node of the cluster as holdfast check --cluster reads it.
type Node struct {
	Name   string
	Labels map[string]string
	// Condition is the Node's HoldfastImagesReady condition; nil when it
	// has none.
	Condition *ClusterCondition
}

// Cluster is the cluster's verdict: node by node, the images not ready.
type Cluster struct {
	// Manifests says whether the images judged are those of the manifests
	// given (-f), not those each node's reporter watches.
	Manifests bool          `json:"manifests"`
	Nodes     []ClusterNode `json:"nodes"`
	Totals    ClusterTotals `json:"totals"`
	// Nowhere are the images missing on a node that no node holds, as
	// their reports say: no peer can serve them, they must be carried.
	Nowhere []string `json:"nowhere,omitempty"`
}

// ClusterNode is one node's verdict.
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
	// Ready: every image judged on the node is ready (Ready: pinned; with
	// allowUnpinned, present). A node without a report is not ready.
	Ready  bool                 `json:"ready"`
	Counts map[report.State]int `json:"counts"`
	// NotReady are the images judged that are not pinned, sorted; Cut
	// counts those the node's report left out of its list.
	NotReady []report.Image `json:"notReady"`
	Cut      int            `json:"cut,omitempty"`

	// Holds are, of the manifests' images, those the node holds (pinned or
	// present).
	Holds []string `json:"-"`
}

// ClusterCondition is a Node's HoldfastImagesReady condition.
type ClusterCondition struct {
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
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

// JudgeCluster says, node by node, which images are not ready: with set,
// those of its images that may run on the node, judged against what the
// node's report (reports, by node name) says it holds; without, what the
// node's report says of the images its reporter watches. A report whose
// held list does not read is an error naming it, and the node counts as
// having none.
func JudgeCluster(nodes []Node, reports map[string]report.NodeImages, set *Set, allowUnpinned bool) (Cluster, []error) {
	out := Cluster{Manifests: set != nil, Nodes: []ClusterNode{}}
	var errs []error
	var images []Image
	if set != nil {
		images = set.Images()
	}
	memo := judgments{}
	for _, n := range nodes {
		cn := ClusterNode{Name: n.Name, Condition: n.Condition, Counts: map[report.State]int{}, NotReady: []report.Image{}}
		ni, ok := reports[cn.Name]
		cn.Report = ok
		if ok {
			updated := ni.Updated
			cn.Updated, cn.Held = &updated, ni.Images
		}
		switch {
		case !ok:
		case set != nil:
			if err := cn.judgeImages(ni, imagesOn(images, n), memo); err != nil {
				errs = append(errs, fmt.Errorf("NodeImages %s: %w", cn.Name, err))
				cn.Report = false
			}
		case ni.Required != nil && ni.Required.Known:
			cn.takeReport(*ni.Required)
		default:
			cn.Report = false // written before the agent had a set: it says nothing yet
		}
		lacking := 0
		for st, k := range cn.Counts {
			if !Ready(st, allowUnpinned) {
				lacking += k
			}
		}
		cn.Ready = cn.Report && lacking == 0
		out.Totals.add(cn)
		out.Nodes = append(out.Nodes, cn)
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Name < out.Nodes[j].Name })
	out.Nowhere = heldNowhere(out.Nodes, reports, memo)
	return out, errs
}

// heldNowhere are the images some node misses that no node with a report
// holds, pinned or not, sorted.
func heldNowhere(nodes []ClusterNode, reports map[string]report.NodeImages, memo judgments) []string {
	missing := map[string]bool{}
	for _, n := range nodes {
		for _, img := range n.NotReady {
			if img.State == report.Missing || img.State == report.Mismatch {
				missing[img.Ref] = true
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	var wanted []Image
	for ref := range missing {
		wanted = append(wanted, Image{Ref: ref})
	}
	sort.Slice(wanted, func(i, j int) bool { return wanted[i].Ref < wanted[j].Ref })
	for _, n := range nodes {
		ni, ok := reports[n.Name]
		if !ok || !n.Report {
			continue
		}
		verdicts, err := memo.judge(ni, wanted)
		if err != nil {
			continue // said already, for the node
		}
		for _, v := range verdicts {
			if v.State == report.Pinned || v.State == report.Present {
				delete(missing, v.Ref)
			}
		}
	}
	var out []string
	for _, img := range wanted {
		if missing[img.Ref] {
			out = append(out, img.Ref)
		}
	}
	return out
}

// imagesOn are the images of which some use may run on n, with those uses.
func imagesOn(images []Image, n Node) []Image {
	var here []Image
	for _, img := range images {
		var uses []Use
		for _, u := range img.Uses {
			if u.Placement.MayRunOn(n.Name, n.Labels) {
				uses = append(uses, u)
			}
		}
		if len(uses) > 0 {
			here = append(here, Image{Ref: img.Ref, Uses: uses})
		}
	}
	return here
}

// judgeImages judges here against what ni says the node holds.
func (cn *ClusterNode) judgeImages(ni report.NodeImages, here []Image, memo judgments) error {
	verdicts, err := memo.judge(ni, here)
	if err != nil {
		return err
	}
	for i, v := range verdicts {
		cn.Counts[v.State]++
		if v.State == report.Pinned || v.State == report.Present {
			cn.Holds = append(cn.Holds, v.Ref)
		}
		if v.State != report.Pinned {
			// The cluster's view names no record's target.
			cn.NotReady = append(cn.NotReady, report.Image{Ref: v.Ref, State: v.State, UsedBy: here[i].UsedBy()})
		}
	}
	return nil
}

// takeReport takes what the node's agent judged of the images its
// reporter watches: the counts whole, the list as cut.
func (cn *ClusterNode) takeReport(req report.Required) {
	shown := 0
	for st, k := range req.Counts {
		cn.Counts[st] = k
		if st != report.Pinned {
			shown += k
		}
	}
	for _, v := range req.NotReady {
		v.Pulling, v.PullError = false, "" // the agent's pulls are the node's own view
		cn.NotReady = append(cn.NotReady, v)
	}
	cn.Cut = shown - len(cn.NotReady)
}

// add counts cn in.
func (t *ClusterTotals) add(cn ClusterNode) {
	t.Nodes++
	switch {
	case !cn.Report:
		t.NoReport++
	case cn.Ready:
		t.Ready++
	default:
		t.Lacking++
	}
	t.Unpinned += cn.Counts[report.Present]
	t.Missing += cn.Counts[report.Missing] + cn.Counts[report.Mismatch]
}

// judgments remembers verdicts by what a node holds (its held hash) and
// which images may run there: the nodes of a pool hold the same, and are
// judged once.
type judgments map[string][]report.Image

func (m judgments) judge(ni report.NodeImages, here []Image) ([]report.Image, error) {
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
	held, err := report.Unpack(ni.Held)
	if err != nil {
		return nil, err
	}
	v := Judge(here, heldRecords(held))
	m[key.String()] = v
	return v, nil
}

// heldRecords are the image records a node's report says it holds, as
// Judge takes them.
func heldRecords(held report.Held) []runtime.Image {
	out := make([]runtime.Image, len(held))
	for i, h := range held {
		out[i] = runtime.Image{Name: h.Name, Target: ocispec.Descriptor{Digest: digest.Digest(h.Digest)}}
		if h.Pinned {
			out[i].Labels = map[string]string{runtime.LabelCRIPinned: runtime.PinnedValue}
		}
	}
	return out
}

// ClusterForcedPull is an image the kubelet would pull again although
// nodes hold it.
type ClusterForcedPull struct {
	Ref string `json:"ref"`
	report.ForcedPull
	// Nodes are the nodes that hold it (pinned or present) and may run
	// its pods, sorted.
	Nodes []string `json:"nodes"`
}

// ForcedPulls are the images of set that the kubelet would pull again
// (forced returns nil for one it would not), each with the nodes of c that
// hold it.
func (c Cluster) ForcedPulls(set *Set, forced func(Image) *report.ForcedPull) []ClusterForcedPull {
	nodes := map[string][]string{}
	for _, n := range c.Nodes {
		for _, ref := range n.Holds {
			nodes[ref] = append(nodes[ref], n.Name)
		}
	}
	var out []ClusterForcedPull
	for _, img := range set.Images() {
		if len(nodes[img.Ref]) == 0 {
			continue
		}
		if f := forced(img); f != nil {
			out = append(out, ClusterForcedPull{Ref: img.Ref, ForcedPull: *f, Nodes: nodes[img.Ref]})
		}
	}
	return out
}

package imageset

import (
	"github.com/holdfast-project/holdfast/internal/pattern"
	"github.com/holdfast-project/holdfast/internal/report"
)

// Node is what the leader and each reporter know of one node the agent runs
// on (one that has a NodeImages object): its labels, from its Node, and
// what its agent says of the sets, from its NodeImages. Labels nil means
// they are not known (a reporter reads no other Node): whether a set
// selects the node is then what its agent says (SetState.Selected).
type Node struct {
	Name   string
	Labels map[string]string
	Sets   []report.SetState
}

// selectedBy reports whether set selects n.
func (n Node) selectedBy(set ImageSet) bool {
	if n.Labels != nil {
		return set.Spec.Selects(n.Labels)
	}
	for _, s := range n.Sets {
		if s.Name == set.Metadata.Name {
			return s.Selected
		}
	}
	return false
}

// images is where each image of the set called name stands on n, by
// normalized reference: what its agent said, the phases as they are. A node
// whose agent has not said anything of the set yet has nothing of it.
// Each reference is normalized once through memo: the nodes name the same
// images, and a reference parses in microseconds (seconds for 1,000 nodes
// of 500 images each).
func (n Node) images(name string, memo map[string]string) map[string]ImageState {
	size := 0
	for _, s := range n.Sets {
		if s.Name == name {
			size += len(s.Images)
		}
	}
	out := make(map[string]ImageState, size)
	for _, s := range n.Sets {
		if s.Name != name {
			continue
		}
		for _, img := range s.Images {
			ref, ok := memo[img.Ref]
			if !ok {
				ref = Normalize(img.Ref)
				memo[img.Ref] = ref
			}
			out[ref] = ImageState{Phase: img.Phase, Error: img.Error, Since: img.Since}
		}
	}
	return out
}

// Normalize is ref as the kubelet and the agent name it (docker.io/library/
// nginx:latest for nginx), or ref itself when it does not parse: a set may
// write an image either way, and its agent's word on it is found.
func Normalize(ref string) string {
	if n, err := pattern.NormalizeRef(ref); err == nil {
		return n
	}
	return ref
}

// normalized is Normalize of each of images.
func normalized(images []string) []string {
	out := make([]string, len(images))
	for i, img := range images {
		out[i] = Normalize(img)
	}
	return out
}

// stateOf is where img stands in images, found as written or normalized
// (normal: Normalize(img)).
func stateOf(images map[string]ImageState, img, normal string) ImageState {
	if s, ok := images[img]; ok {
		return s
	}
	return images[normal]
}

// States are the states of the nodes set selects, for Aggregate: every node
// of nodes the set selects, each with what its agent says of the set.
func States(set ImageSet, nodes []Node) []NodeState {
	var out []NodeState
	memo := map[string]string{}
	for _, n := range nodes {
		if n.selectedBy(set) {
			out = append(out, NodeState{Node: n.Name, Images: n.images(set.Metadata.Name, memo)})
		}
	}
	return out
}

// Admit is, of the images of set, those node may start pulling now, by
// MayPull: for each image, its holders are the nodes that say they hold it
// (selected by the set or not: a holder serves its peers either way), the
// ones pulling it the selected nodes that say so, and the waiting ones the
// selected nodes that do not hold it and have not started (Waiting, or
// nothing said yet). A node the set does not select may pull nothing.
func Admit(node string, set ImageSet, nodes []Node) []string {
	var out []string
	for _, a := range Admissions(node, set, nodes) {
		out = append(out, a.Image)
	}
	return out
}

// Admission is an image a node may start pulling now, and the holder the
// waves send it to (Place).
type Admission struct {
	Image string
	From  string // the holder's node name
}

// Admissions is Admit, each image with the holder to fetch it from.
func Admissions(node string, set ImageSet, nodes []Node) []Admission {
	var me *Node
	states := make([]map[string]ImageState, len(nodes))
	selected := make([]bool, len(nodes))
	memo := map[string]string{}
	for i := range nodes {
		states[i] = nodes[i].images(set.Metadata.Name, memo)
		selected[i] = nodes[i].selectedBy(set)
		if nodes[i].Name == node && selected[i] {
			me = &nodes[i]
		}
	}
	if me == nil {
		return nil
	}
	var out []Admission
	for _, img := range uniqueSorted(set.Spec.Images) {
		var holders, pulling, waiting []string
		normal := Normalize(img)
		for i, n := range nodes {
			switch st := stateOf(states[i], img, normal); {
			case st.Phase == Held:
				holders = append(holders, n.Name)
			case !selected[i]:
			case st.Phase == Pulling:
				pulling = append(pulling, n.Name)
			case st.Phase == Waiting || st.Phase == "":
				waiting = append(waiting, n.Name)
			}
		}
		if from, ok := Place(node, img, holders, pulling, waiting, set.Spec.Concurrency()); ok {
			out = append(out, Admission{Image: img, From: from})
		}
	}
	return out
}

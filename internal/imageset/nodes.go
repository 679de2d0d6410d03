package imageset

import (
	"slices"

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
	// PeerMirror is the node's peer mirror (NodeImages.PeerMirror): the
	// waves find by it the holder an image's From names.
	PeerMirror string
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
			out[ref] = ImageState{Phase: img.Phase, Error: img.Error, Since: img.Since, From: img.From}
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

// Admissions is Admit, each image with the holder to fetch it from. Every
// reporter computes it on each change of any node during a rollout, over
// every node: it reads each node's word once, into one slot per image, and
// asks Place only of the images node neither holds nor pulls.
func Admissions(node string, set ImageSet, nodes []Node) []Admission {
	images := uniqueSorted(set.Spec.Images)
	slots := map[string][]int{} // normalized reference → its images' indexes
	for i, img := range images {
		n := Normalize(img)
		slots[n] = append(slots[n], i)
	}
	holders := make([][]string, len(images))
	pulling := make([][]string, len(images))
	waiting := make([][]string, len(images))
	// from is, of each image, node → the holder it was sent to, of the nodes that say one
	from := make([]map[string]string, len(images))
	var mine []Phase // node's phase of each image; nil while node is not seen selected
	phase := make([]Phase, len(images))
	sentTo := make([]string, len(images)) // of the node read: its From of each image
	memo := map[string]string{}
	mirrors := mirrorNodes(nodes)
	for _, n := range nodes {
		clear(phase)
		clear(sentTo)
		for _, s := range n.Sets {
			if s.Name != set.Metadata.Name {
				continue
			}
			for _, img := range s.Images {
				is, ok := slots[img.Ref] // the agents say normalized references
				if !ok {
					ref, seen := memo[img.Ref]
					if !seen {
						ref = Normalize(img.Ref)
						memo[img.Ref] = ref
					}
					is = slots[ref]
				}
				for _, i := range is {
					phase[i] = img.Phase
					sentTo[i] = img.From
				}
			}
		}
		selected := n.selectedBy(set)
		if n.Name == node && selected {
			mine = slices.Clone(phase)
		}
		for i, ph := range phase {
			if h := mirrors[sentTo[i]]; h != "" && h != n.Name && (ph == Held || selected && ph == Pulling) {
				if from[i] == nil {
					from[i] = map[string]string{}
				}
				from[i][n.Name] = h
			}
			switch {
			case ph == Held:
				holders[i] = append(holders[i], n.Name)
			case !selected:
			case ph == Pulling:
				pulling[i] = append(pulling[i], n.Name)
			case ph == Waiting || ph == "":
				waiting[i] = append(waiting[i], n.Name)
			}
		}
	}
	if mine == nil {
		return nil
	}
	hashes := map[string]uint64{}
	hashOf := func(name string) uint64 {
		h, ok := hashes[name]
		if !ok {
			h = hash(name)
			hashes[name] = h
		}
		return h
	}
	var out []Admission
	var others []string
	var ranks []uint64
	for i, img := range images {
		if mine[i] == Held || mine[i] == Pulling {
			continue
		}
		hi := hash(img)
		others, ranks = others[:0], ranks[:0]
		for _, n := range waiting[i] {
			if n != node {
				others = append(others, n)
				ranks = append(ranks, mix(hashOf(n), hi))
			}
		}
		if !slices.IsSorted(holders[i]) {
			slices.Sort(holders[i])
		}
		serving, busy := servers(holders[i], pulling[i], from[i])
		if h, ok := place(node, mix(hashOf(node), hi), serving, busy, len(pulling[i]), others, ranks, set.Spec.Concurrency()); ok {
			out = append(out, Admission{Image: img, From: h})
		}
	}
	return out
}

// mirrorNodes are the nodes by their peer mirrors.
func mirrorNodes(nodes []Node) map[string]string {
	out := map[string]string{}
	for _, n := range nodes {
		if n.PeerMirror != "" {
			out[n.PeerMirror] = n.Name
		}
	}
	return out
}

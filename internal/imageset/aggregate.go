package imageset

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Aggregate is the status of set given the states of the nodes it selects
// now (a node that left the selector is not among them, and so leaves the
// status). The previous status, set.Status, keeps each condition's
// lastTransitionTime while its status holds. The output is sorted, and
// depends on now only through a condition that changes, so that the leader
// writes nothing when nothing changed.
//
// Staged is True exactly when at least one node is selected and every
// selected node holds every image pinned; with no node selected it is
// False, since a selector that matches nothing is more likely a mistake
// than a release staged, and kubectl wait must not let it through.
// Progressing is True while some selected node lacks an image: a failed
// pull is retried with backoff and an image held nowhere may still be
// imported, so neither ends it; its reason says which holds it up
// (MissingEverywhere before Failing before Pulling).
func Aggregate(set ImageSet, nodes []NodeState, now time.Time) Status {
	images := uniqueSorted(set.Spec.Images)
	normal := normalized(images)
	nodes = uniqueNodes(nodes)
	var st Status
	st.Nodes.Selected = len(nodes)
	missing := map[string][]string{}
	held := map[string]int{}
	for _, n := range nodes {
		staged, failed := true, false
		for i, img := range images {
			s := stateOf(n.Images, img, normal[i])
			switch s.Phase {
			case Held:
				held[img]++
				continue
			case Failed:
				failed = true
				st.FailureCount++
				st.Failures = append(st.Failures, Failure{Node: n.Node, Image: img, Error: cut(s.Error), Since: s.Since.UTC().Truncate(time.Second)})
			}
			staged = false
			missing[img] = append(missing[img], n.Node)
		}
		if staged {
			st.Nodes.Staged++
		}
		if failed {
			st.Nodes.Failed++
		}
	}
	var everywhere []string
	for _, img := range images {
		names, ok := missing[img]
		if !ok {
			continue
		}
		st.MissingImages++
		if held[img] == 0 {
			everywhere = append(everywhere, img)
		}
		if len(st.Missing) < MaxMissing {
			st.Missing = append(st.Missing, MissingImage{Image: img, Nodes: len(names), NodeNames: names[:min(len(names), MaxMissingNodes)]})
		}
	}
	if len(st.Failures) > MaxFailures {
		st.Failures = st.Failures[:MaxFailures]
	}
	staged, progressing := conditions(st, everywhere)
	gen := set.Metadata.Generation
	st.Conditions = []Condition{
		transition(set.Status.Conditions, staged, gen, now),
		transition(set.Status.Conditions, progressing, gen, now),
	}
	return st
}

// conditions are the Staged and Progressing conditions of st, without their
// times; everywhere are the images no selected node holds.
func conditions(st Status, everywhere []string) (staged, progressing Condition) {
	staged = Condition{Type: Staged, Status: False}
	progressing = Condition{Type: Progressing, Status: True}
	n := st.Nodes
	switch {
	case n.Selected == 0:
		staged.Reason, staged.Message = "NoNodesSelected", "the node selector matches no node the agent runs on"
		progressing.Status, progressing.Reason, progressing.Message = False, staged.Reason, staged.Message
		return staged, progressing
	case st.MissingImages == 0:
		staged.Status, staged.Reason = True, "Staged"
		staged.Message = fmt.Sprintf("all %d nodes hold every image pinned", n.Selected)
		progressing.Status, progressing.Reason, progressing.Message = False, staged.Reason, staged.Message
		return staged, progressing
	}
	staged.Reason = "ImagesMissing"
	staged.Message = fmt.Sprintf("%d of %d nodes hold every image pinned; %d images missing", n.Staged, n.Selected, st.MissingImages)
	switch {
	case len(everywhere) > 0:
		progressing.Reason = "MissingEverywhere"
		progressing.Message = "missing everywhere (held by no selected node): " + list(everywhere)
	case n.Failed > 0:
		progressing.Reason = "Failing"
		progressing.Message = fmt.Sprintf("%d nodes failed to pull, retrying with backoff; first: %s %s: %s",
			n.Failed, st.Failures[0].Node, st.Failures[0].Image, st.Failures[0].Error)
	default:
		progressing.Reason = "Pulling"
		progressing.Message = fmt.Sprintf("%d images still spreading to %d nodes", st.MissingImages, n.Selected-n.Staged)
	}
	return staged, progressing
}

// transition is c observed at generation gen, its time taken from the
// previous condition of its type when the status is unchanged, now if not.
func transition(prev []Condition, c Condition, gen int64, now time.Time) Condition {
	c.ObservedGeneration = gen
	c.LastTransitionTime = now.UTC().Truncate(time.Second)
	for _, p := range prev {
		if p.Type == c.Type && p.Status == c.Status {
			c.LastTransitionTime = p.LastTransitionTime
		}
	}
	return c
}

// list is the first names of s, joined, and how many more there are.
func list(s []string) string {
	const shown = 5
	if len(s) <= shown {
		return strings.Join(s, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(s[:shown], ", "), len(s)-shown)
}

// cut is an error cut to MaxErrorLen bytes, at a rune's start.
func cut(s string) string {
	if len(s) <= MaxErrorLen {
		return s
	}
	i := MaxErrorLen
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i] + "…"
}

func uniqueSorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	w := 0
	for i, v := range out {
		if v == "" || (i > 0 && v == out[i-1]) {
			continue
		}
		out[w] = v
		w++
	}
	return out[:w]
}

// uniqueNodes is nodes sorted by name, the first of each name kept.
func uniqueNodes(nodes []NodeState) []NodeState {
	out := append([]NodeState(nil), nodes...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	w := 0
	for i, n := range out {
		if i > 0 && n.Node == out[i-1].Node {
			continue
		}
		out[w] = n
		w++
	}
	return out[:w]
}

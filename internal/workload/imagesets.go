package workload

import (
	"fmt"
	"sort"

	"github.com/holdfast-project/holdfast/internal/imageset"
)

// NotAggregated is what check --cluster says of an ImageSet whose status
// does not speak of its spec as it is: the leader among the reporters has
// not written it since the spec last changed, or ever.
const NotAggregated = "not yet aggregated: is a reporter elected?"

// ClusterSet is one ImageSet as check --cluster shows it: its progress as
// the leader last wrote it into its status.
type ClusterSet struct {
	Name string `json:"name"`
	// Images counts the references of its spec.
	Images int `json:"images"`
	// Generation is the spec's; Observed the one its status speaks of (the
	// least of its conditions' observedGeneration), 0 with no status.
	Generation int64 `json:"generation"`
	Observed   int64 `json:"observedGeneration"`
	// Current says the status speaks of the spec as it is; when it does
	// not, Note says so (NotAggregated, and of which generation it is).
	Current bool   `json:"current"`
	Note    string `json:"note,omitempty"`
	// Staged and Progressing are its conditions; nil when not written.
	Staged      *SetCondition `json:"staged,omitempty"`
	Progressing *SetCondition `json:"progressing,omitempty"`
	// Nodes counts the selected nodes, those staged and those failing.
	Nodes imageset.NodeCounts `json:"nodes"`
	// MissingImages counts the images some selected node lacks; Missing
	// lists them as the status does (the first of them, sorted).
	MissingImages int                     `json:"missingImages"`
	Missing       []imageset.MissingImage `json:"missing,omitempty"`
	// FailureCount counts the failed pulls; Failures lists the first of
	// them, by node then image.
	FailureCount int                `json:"failureCount"`
	Failures     []imageset.Failure `json:"failures,omitempty"`
}

// SetCondition is a condition of an ImageSet: its status, reason and
// message.
type SetCondition struct {
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// JudgeSets is each set's progress from its status, sorted by name: a
// status without conditions, or whose conditions observed an older
// generation than the spec's, is not current, and its note says so.
func JudgeSets(sets []imageset.ImageSet) []ClusterSet {
	out := make([]ClusterSet, 0, len(sets))
	for _, s := range sets {
		st := s.Status
		cs := ClusterSet{
			Name: s.Metadata.Name, Images: len(s.Spec.Images), Generation: s.Metadata.Generation,
			Nodes: st.Nodes, MissingImages: st.MissingImages, Missing: st.Missing, FailureCount: st.FailureCount, Failures: st.Failures,
		}
		seen := false
		for _, c := range st.Conditions {
			switch c.Type {
			case imageset.Staged:
				cs.Staged = &SetCondition{Status: c.Status, Reason: c.Reason, Message: c.Message}
			case imageset.Progressing:
				cs.Progressing = &SetCondition{Status: c.Status, Reason: c.Reason, Message: c.Message}
			default:
				continue
			}
			if !seen || c.ObservedGeneration < cs.Observed {
				cs.Observed, seen = c.ObservedGeneration, true
			}
		}
		switch {
		case cs.Staged == nil:
			cs.Note = "no status yet: " + NotAggregated
		case cs.Observed < cs.Generation:
			cs.Note = fmt.Sprintf("status of generation %d, spec at %d: %s", cs.Observed, cs.Generation, NotAggregated)
		default:
			cs.Current = true
		}
		out = append(out, cs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

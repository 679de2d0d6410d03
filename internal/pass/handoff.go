package pass

import (
	"maps"

	"github.com/holdfast-project/holdfast/internal/pattern"
	"github.com/holdfast-project/holdfast/internal/reconcile"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/source"
)

// Handoff is how a pass hands what it decided to the healer that keeps the
// records in line between passes (the daemon's), and learns whether image
// events came while it ran. A one-shot pass has none: nothing heals after it.
type Handoff interface {
	// Begin says a pass starts: the names of image events from now on are
	// kept for it until Pinned. The mark is for Changed.
	Begin() (mark uint64)
	// Changed says whether image events came since Begin gave mark: the
	// records the pass listed may be stale.
	Changed(mark uint64) bool
	// Pinning gives the names heal may restore while the pass applies its
	// pins: every name the plan wants but those it pins for the first time,
	// as only a first pin notices a user's own pin that was there before.
	Pinning(wanted map[string]hfruntime.Want)
	// Pinned gives the plan's whole wanted set, and the names kept sources
	// want, once its pins are applied and before anything is unpinned.
	Pinned(wanted map[string]hfruntime.Want, kept map[string]bool)
	// PinLists gives the paths of the pin lists the pass found, and the
	// patterns of those it read, by path: an image that arrives later and
	// matches one brings on a pass.
	PinLists(found []string, read map[string][]pattern.Pattern)
	// Peers gives the references of every list of kind peers the daemon
	// owns and writes (the peer source, Config.PeerList, and a list per
	// ImageSet), by path, as the daemon has them, as a pass starts and
	// before it scans: the pass takes them, not the lines of their files.
	// A list at a path it names is of kind peers however it is read.
	Peers() map[string]PeerRefs
}

// PeerRefs are the references of a list of kind peers as its owner has
// them.
type PeerRefs struct {
	// Known is false when the owner has none to give (it could not read
	// its file at start): the file is then read as any pull list.
	Known bool
	// Entries are the references, each with its line in the file as the
	// owner writes it, for the errors that name it.
	Entries []source.PullEntry
	// Keep are those of Entries no workload needs any more: kept as the
	// source leased them before, never pulled or pinned anew.
	Keep map[string]bool
	// Prefer is, by reference, the peer mirror (http://host:port) of the
	// holder to fetch its content from first (hfruntime.PullOptions.Prefer):
	// the owner's word of the moment, read as each pull starts.
	Prefer map[string]string
}

type noHandoff struct{}

func (noHandoff) Begin() uint64                                     { return 0 }
func (noHandoff) Changed(uint64) bool                               { return false }
func (noHandoff) Pinning(map[string]hfruntime.Want)                 {}
func (noHandoff) Pinned(map[string]hfruntime.Want, map[string]bool) {}
func (noHandoff) PinLists([]string, map[string][]pattern.Pattern)   {}
func (noHandoff) Peers() map[string]PeerRefs                        { return nil }

// pinning is what a plan hands heal while its pins are applied (Handoff.Pinning).
func pinning(plan reconcile.Plan) map[string]hfruntime.Want {
	w := maps.Clone(plan.WantedNames)
	for _, p := range plan.Pins {
		if p.Reason == reconcile.ReasonNew {
			delete(w, p.Want.Name)
		}
	}
	return w
}

// pinListPaths are the paths of the pin lists scan found.
func pinListPaths(scan source.Result) []string {
	var out []string
	for _, src := range scan.Sources {
		if src.Kind == source.PinList {
			out = append(out, src.Path)
		}
	}
	return out
}

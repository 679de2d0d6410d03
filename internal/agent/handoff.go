package agent

import (
	"github.com/holdfast-project/holdfast/internal/pass"
	"github.com/holdfast-project/holdfast/internal/pattern"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
)

// The agent takes what each pass decided (pass.Handoff): heal works from the
// wanted set the pass hands over, and image events that come while a pass
// runs are kept, to be healed against the set it then hands over; the peer
// source's references come from the required images' peer list, and each
// ImageSet's from its list.

var _ pass.Handoff = (*Agent)(nil)

// Begin starts keeping the names of image events for a pass, and returns the
// event count for Changed.
func (a *Agent) Begin() uint64 { return a.heal.begin() }

// Changed reports whether image events came after Begin returned mark:
// records listed before then may be stale.
func (a *Agent) Changed(mark uint64) bool { return a.heal.changed(mark) }

// Pinning sets the wanted set while a plan's pins are applied: every name the
// plan wants but those it pins for the first time, so that an event's heal
// never pins such a name before the pass does. Image events keep being kept
// until Pinned, and are healed after the pass.
func (a *Agent) Pinning(wanted map[string]hfruntime.Want) { a.heal.pinning(wanted) }

// Pinned makes wanted the wanted set: from now on image events are healed
// against it, and no longer kept for the pass. kept are the names kept
// sources want.
func (a *Agent) Pinned(wanted map[string]hfruntime.Want, kept map[string]bool) {
	a.heal.pinned(wanted, kept)
}

// PinLists keeps the patterns of the pin lists a pass read, so that an image
// that arrives later and matches one brings on a pass at once. A list the
// pass did not read (still being written) keeps its patterns; a list that is
// gone loses them.
func (a *Agent) PinLists(found []string, read map[string][]pattern.Pattern) {
	a.heal.pinLists(found, read)
}

// Peers gives a pass the references of the lists the agent owns, by path:
// the peer source's and each ImageSet's, after writing the agent's list back
// over a file someone edited. Those the list is no longer for (in their
// grace period; all of them before the reporter sent a required set, or any
// sets) are only kept.
func (a *Agent) Peers() map[string]pass.PeerRefs {
	out := map[string]pass.PeerRefs{}
	if refs, ok := a.peers.forPass(a.required.set()); ok {
		out[a.cfg.PeerList] = refs
	}
	a.sets.forPass(out)
	return out
}

func (h *healer) begin() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.collecting = true
	return h.imageEvents
}

func (h *healer) changed(mark uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.imageEvents != mark
}

func (h *healer) pinning(wanted map[string]hfruntime.Want) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wanted = wanted
}

func (h *healer) pinned(wanted map[string]hfruntime.Want, kept map[string]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wanted = wanted
	h.kept = kept
	h.collecting = false
}

func (h *healer) pinLists(found []string, read map[string][]pattern.Pattern) {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.pinPatterns
	h.pinPatterns = map[string][]pattern.Pattern{}
	for _, path := range found {
		if ps, ok := read[path]; ok {
			h.pinPatterns[path] = ps
		} else if ps, ok := old[path]; ok {
			h.pinPatterns[path] = ps
		}
	}
}

// takeTouched returns the names of the image events kept so far, and forgets them.
func (h *healer) takeTouched() map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.touched
	h.touched = map[string]bool{}
	return t
}

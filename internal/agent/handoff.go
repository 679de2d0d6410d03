package agent

import (
	"github.com/holdfast-project/holdfast/internal/pass"
	"github.com/holdfast-project/holdfast/internal/pattern"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
)

// The agent takes what each pass decided (pass.Handoff): heal works from the
// wanted set the pass hands over, and image events that come while a pass
// runs are kept, to be healed against the set it then hands over.

var _ pass.Handoff = (*Agent)(nil)

// Begin starts keeping the names of image events for a pass, and returns the
// event count for Changed.
func (a *Agent) Begin() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.collecting = true
	return a.imageEvents
}

// Changed reports whether image events came after Begin returned mark:
// records listed before then may be stale.
func (a *Agent) Changed(mark uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.imageEvents != mark
}

// Pinning sets the wanted set while a plan's pins are applied: every name the
// plan wants but those it pins for the first time, so that an event's heal
// never pins such a name before the pass does. Image events keep being kept
// until Pinned, and are healed after the pass.
func (a *Agent) Pinning(wanted map[string]hfruntime.Want) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.wanted = wanted
}

// Pinned makes wanted the wanted set: from now on image events are healed
// against it, and no longer kept for the pass. kept are the names kept
// sources want.
func (a *Agent) Pinned(wanted map[string]hfruntime.Want, kept map[string]bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.wanted = wanted
	a.kept = kept
	a.collecting = false
}

// PinLists keeps the patterns of the pin lists a pass read, so that an image
// that arrives later and matches one brings on a pass at once. A list the
// pass did not read (still being written) keeps its patterns; a list that is
// gone loses them.
func (a *Agent) PinLists(found []string, read map[string][]pattern.Pattern) {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.pinPatterns
	a.pinPatterns = map[string][]pattern.Pattern{}
	for _, path := range found {
		if ps, ok := read[path]; ok {
			a.pinPatterns[path] = ps
		} else if ps, ok := old[path]; ok {
			a.pinPatterns[path] = ps
		}
	}
}

// takeTouched returns the names of the image events kept so far, and forgets them.
func (a *Agent) takeTouched() map[string]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.touched
	a.touched = map[string]bool{}
	return t
}

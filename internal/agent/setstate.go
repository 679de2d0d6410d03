package agent

import (
	"slices"
	"strings"
	"time"

	"github.com/holdfast-project/holdfast/internal/report"
)

// statesLocked says where each image of the sets as last sent stands, by
// what the store pins (pinned, by name) and the lists name: for a set that
// selects the node every image, Held (a record of the name is pinned, by
// whichever source), Failed (its reference does not parse, its last pull
// failed, or the policy refused it), Pulling (listed) or Waiting (not
// listed: the waves have not let it yet); for a set that does not, only
// those held. A failure's Since is when the agent first saw this run of
// failures of the reference; an image held or pulling since its list took
// it to pull says the peer mirror the waves sent it to (From).
func (s *sets) statesLocked(pinned map[string]bool) []report.SetState {
	if !s.known {
		return nil
	}
	now := s.clock.Now()
	since := map[string]time.Time{}
	fail := func(key, why string) report.SetImage {
		t, ok := s.since[key]
		if !ok {
			t = now
		}
		since[key] = t
		return report.SetImage{Phase: report.SetFailed, Error: cutError(why), Since: t}
	}
	out := make([]report.SetState, 0, len(s.body))
	for _, set := range s.body {
		st := report.SetState{Name: set.Name, Generation: set.Generation, Selected: set.Selected}
		l := s.lists[set.Name]
		for _, ref := range set.Images {
			img := report.SetImage{Ref: ref, Phase: report.SetWaiting}
			switch {
			case pinned[ref]:
				img.Phase = report.SetHeld
			case !set.Selected:
				continue
			case l == nil || !l.listed(ref):
			case s.pulls.PullFailure(ref) != nil:
				img = fail(ref, s.pulls.PullFailure(ref).Error())
			case s.pulls.Refusal(ref) != "":
				img = fail(ref, "refused by the signature policy: "+s.pulls.Refusal(ref))
			default:
				img.Phase = report.SetPulling
			}
			if img.Phase == report.SetHeld || img.Phase == report.SetPulling {
				img.From = s.sentTo[set.Name][ref]
			}
			img.Ref = ref
			st.Images = append(st.Images, img)
		}
		if set.Selected {
			for raw, why := range set.bad {
				img := fail("\x00"+raw, why)
				img.Ref = raw
				st.Images = append(st.Images, img)
			}
		}
		slices.SortFunc(st.Images, func(a, b report.SetImage) int { return strings.Compare(a.Ref, b.Ref) })
		out = append(out, st)
	}
	s.since = since
	return out
}

// cutError is why cut to report.MaxSetError bytes, at a rune's start.
func cutError(why string) string {
	if len(why) <= report.MaxSetError {
		return why
	}
	i := report.MaxSetError
	for i > 0 && why[i]&0xC0 == 0x80 {
		i--
	}
	return why[:i]
}

// forReport is the report's part on the sets: nil before the reporter sent
// any.
func (s *sets) forReport() []report.SetState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.known {
		return nil
	}
	return slices.Clone(s.states)
}

// sortSets sorts sets by name.
func sortSets(sets []stageSet) {
	slices.SortFunc(sets, func(a, b stageSet) int { return strings.Compare(a.Name, b.Name) })
}

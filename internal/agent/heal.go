package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/holdfast-project/holdfast/internal/backoff"
	"github.com/holdfast-project/holdfast/internal/journal"
	"github.com/holdfast-project/holdfast/internal/pattern"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
)

// Heal backoff: a name healed healBurst times within healWindow waits before
// its next heal, twice as long each time, up to healMaxDelay. On a containerd
// whose CRI does not report pins, the kubelet deletes, holdfast heals, and so
// on: that must cost little and say so once.
const (
	healBurst     = 3
	healWindow    = time.Minute
	healFirstWait = time.Second
	healMaxDelay  = 5 * time.Minute
)

// healer puts back, from leased content, every wanted record an image event
// says was deleted or re-pointed, against the wanted set the last pass handed
// over (handoff.go), each name with its own backoff; and it says when an
// event needs a pass rather than a heal.
type healer struct {
	rt      hfruntime.Runtime
	clock   Clock
	log     *slog.Logger
	rec     Recorder
	journal *journal.Journal
	timer   Timer // the earliest end of a pending backoff

	mu     sync.Mutex
	wanted map[string]hfruntime.Want // what the last plan wants: heal restores these
	heals  map[string]*healState     // per-name heal history, for backoff
	// Image events a pass may not have seen: from its start (or the agent's)
	// until it hands over its wanted set (Pinned), the names of image events are kept
	// (true: created or updated), to be healed against the new wanted set;
	// imageEvents counts every event, so a pass knows its listing is stale.
	collecting  bool
	touched     map[string]bool
	imageEvents uint64
	pinPatterns map[string][]pattern.Pattern // the last pass's pin list patterns, by list path
	kept        map[string]bool              // the wanted names kept sources want (holdfast import)
	foreign     map[string]bool              // names pinned by another holdfast process during a pass
}

type healState struct {
	recent  []time.Time
	until   time.Time
	wait    backoff.Backoff // healFirstWait, doubling up to healMaxDelay
	pending bool
	warned  bool
}

func newHealer(rt hfruntime.Runtime, clock Clock, log *slog.Logger, rec Recorder, j *journal.Journal) *healer {
	return &healer{rt: rt, clock: clock, log: log, rec: rec, journal: j, timer: clock.NewTimer(),
		wanted: map[string]hfruntime.Want{}, heals: map[string]*healState{},
		collecting: true, touched: map[string]bool{}, pinPatterns: map[string][]pattern.Pattern{}, foreign: map[string]bool{}}
}

// due receives when a backoff ends: call retryBackedOff.
func (h *healer) due() <-chan time.Time { return h.timer.C() }

// onImageEvent heals a wanted record that an event says changed, and keeps
// its name while a pass may not have seen it. It reports whether a pass is
// needed: a name nobody wants, which a pin list pattern matches, was created
// or updated.
func (h *healer) onImageEvent(ctx context.Context, ev hfruntime.ImageEvent) bool {
	if hfruntime.IsCRIRecord(ev.Name) {
		return false
	}
	present := ev.Kind != hfruntime.ImageDeleted
	ours := present && ev.Labels[hfruntime.LabelCRIPinned] == hfruntime.PinnedValue &&
		ev.Labels[hfruntime.LabelPinned] == hfruntime.PinnedValue
	if ev.Kind == hfruntime.ImageCreated && ours {
		// A create with both labels is holdfast's own: this agent's, or
		// another holdfast process's (holdfast import), whose lease a pass
		// takes in so that heal keeps the name.
		return h.pinnedElsewhere(ev.Name)
	}
	h.mu.Lock()
	h.imageEvents++
	if h.collecting {
		h.touched[ev.Name] = h.touched[ev.Name] || present
		if ours {
			h.foreign[ev.Name] = true
		}
	}
	want, wanted := h.wanted[ev.Name]
	// During a pass, afterPass decides from the names kept above and the
	// pass's own wanted set: the pass may be pinning this very name.
	pass := !h.collecting && !wanted && present && (ours || h.pinMatchLocked(ev.Name))
	// A kept source's name that lost holdfast's pin may have been released
	// (holdfast release deletes the lease, then unpins): only a pass, which
	// reads the leases, knows whether to pin it again.
	released := wanted && present && !ours && h.kept[ev.Name]
	h.mu.Unlock()
	if released {
		return true
	}
	if wanted {
		h.heal(ctx, want)
	}
	return pass
}

// pinnedElsewhere reports whether a create of a name with holdfast's pin
// needs a pass: the name is not wanted, so another holdfast process pinned
// it. During a pass the answer waits for the pass's wanted set (afterPass).
func (h *healer) pinnedElsewhere(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.collecting {
		h.foreign[name] = true
		return false
	}
	_, wanted := h.wanted[name]
	return !wanted
}

// afterPass heals the names of image events that came while the pass ran,
// against the wanted set it has just set: the pass may have planned before
// they came. It reports whether a pass is needed for a name a pin list
// pattern matches.
func (h *healer) afterPass(ctx context.Context, touched map[string]bool) bool {
	var due []hfruntime.Want
	pass := false
	h.mu.Lock()
	for name, present := range touched {
		if w, ok := h.wanted[name]; ok {
			due = append(due, w)
		} else if present && h.pinMatchLocked(name) {
			pass = true
		}
	}
	for name := range h.foreign {
		if _, ok := h.wanted[name]; !ok {
			pass = true // pinned by another holdfast process during the pass
		}
	}
	h.foreign = map[string]bool{}
	h.mu.Unlock()
	for _, w := range due {
		h.heal(ctx, w)
	}
	return pass
}

func (h *healer) pinMatchLocked(name string) bool {
	for _, ps := range h.pinPatterns {
		for _, p := range ps {
			if p.Match(name) {
				return true
			}
		}
	}
	return false
}

// wantedNames is the names of the wanted set as it stands.
func (h *healer) wantedNames() map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	names := make(map[string]bool, len(h.wanted))
	for n, w := range h.wanted {
		// A record of an image's signatures is no image: the CRI does
		// not list it, and readiness does not wait for it.
		if w.Signs == "" {
			names[n] = true
		}
	}
	return names
}

// heal restores one wanted record from leased content, unless it is in backoff.
func (h *healer) heal(ctx context.Context, want hfruntime.Want) {
	now := h.clock.Now()
	h.mu.Lock()
	st := h.heals[want.Name]
	if st == nil {
		st = &healState{wait: backoff.New(healFirstWait, healMaxDelay)}
		h.heals[want.Name] = st
	}
	if now.Before(st.until) {
		st.pending = true
		h.mu.Unlock()
		h.armTimer()
		return
	}
	st.pending = false
	h.mu.Unlock()

	res, err := h.rt.Pin(ctx, want)
	if err != nil {
		h.log.Error("heal", "name", want.Name, "error", err)
		return
	}
	if !res.Changed() {
		return
	}
	cause := "label"
	switch {
	case res.Created:
		cause = "missing"
	case res.Retargeted:
		cause = "drift"
		h.rec.Drift()
	}
	h.rec.Healed(cause)
	h.log.Info("healed", "name", want.Name, "cause", cause)
	h.count(want.Name, st, now)
}

// count notes a heal of name at now, and starts or lengthens its backoff
// when it was healed healBurst times within healWindow.
func (h *healer) count(name string, st *healState, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	kept := st.recent[:0]
	for _, t := range st.recent {
		if now.Sub(t) < healWindow {
			kept = append(kept, t)
		}
	}
	st.recent = append(kept, now)
	if len(st.recent) >= healBurst {
		if !st.wait.Started() {
			h.journal.Record(journal.Warning, journal.ReasonHealBackoff, fmt.Sprintf(
				"%s healed %d times within %s: something keeps removing or re-pointing it; healing it with backoff", name, len(st.recent), healWindow))
		}
		st.until = now.Add(st.wait.Next())
		h.journal.Backoff(name, st.until)
		if !st.warned {
			st.warned = true
			h.log.Warn("something keeps removing a pinned image; healing it with backoff (on containerd below 1.7.10 or 1.6.25, or a kubelet below 1.29, image GC does not see pins)",
				"name", name, "heals", len(st.recent), "window", healWindow)
		}
	} else {
		st.wait.Reset()
	}
	h.rec.SetBackoff(h.backedOffLocked(now))
}

func (h *healer) backedOffLocked(now time.Time) int {
	n := 0
	for _, st := range h.heals {
		if now.Before(st.until) {
			n++
		}
	}
	return n
}

// armTimer sets the timer to the earliest end of a pending backoff.
func (h *healer) armTimer() {
	h.mu.Lock()
	defer h.mu.Unlock()
	var next time.Time
	for _, st := range h.heals {
		if st.pending && (next.IsZero() || st.until.Before(next)) {
			next = st.until
		}
	}
	if !next.IsZero() {
		h.timer.Reset(max(next.Sub(h.clock.Now()), time.Millisecond))
	}
}

// retryBackedOff heals the names whose backoff has ended.
func (h *healer) retryBackedOff(ctx context.Context) {
	now := h.clock.Now()
	var due []hfruntime.Want
	h.mu.Lock()
	for name, st := range h.heals {
		if st.pending && !now.Before(st.until) {
			if w, ok := h.wanted[name]; ok {
				due = append(due, w)
			}
			st.pending = false
		}
	}
	h.mu.Unlock()
	for _, w := range due {
		h.heal(ctx, w)
	}
	h.armTimer()
}

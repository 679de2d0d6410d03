package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/holdfast-project/holdfast/internal/backoff"
	"github.com/holdfast-project/holdfast/internal/journal"
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

type healState struct {
	recent  []time.Time
	until   time.Time
	wait    backoff.Backoff // healFirstWait, doubling up to healMaxDelay
	pending bool
	warned  bool
}

// onImageEvent heals a wanted record that an event says changed, and keeps
// its name while a pass may not have seen it. It reports whether a pass is
// needed: a name nobody wants, which a pin list pattern matches, was created
// or updated.
func (a *Agent) onImageEvent(ctx context.Context, ev hfruntime.ImageEvent, timer Timer) bool {
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
		return a.pinnedElsewhere(ev.Name)
	}
	a.mu.Lock()
	a.imageEvents++
	if a.collecting {
		a.touched[ev.Name] = a.touched[ev.Name] || present
		if ours {
			a.foreign[ev.Name] = true
		}
	}
	want, wanted := a.wanted[ev.Name]
	// During a pass, afterPass decides from the names kept above and the
	// pass's own wanted set: the pass may be pinning this very name.
	pass := !a.collecting && !wanted && present && (ours || a.pinMatchLocked(ev.Name))
	// A kept source's name that lost holdfast's pin may have been released
	// (holdfast release deletes the lease, then unpins): only a pass, which
	// reads the leases, knows whether to pin it again.
	released := wanted && present && !ours && a.kept[ev.Name]
	a.mu.Unlock()
	if released {
		return true
	}
	if wanted {
		a.heal(ctx, want, timer)
	}
	return pass
}

// pinnedElsewhere reports whether a create of a name with holdfast's pin
// needs a pass: the name is not wanted, so another holdfast process pinned
// it. During a pass the answer waits for the pass's wanted set (afterPass).
func (a *Agent) pinnedElsewhere(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.collecting {
		a.foreign[name] = true
		return false
	}
	_, wanted := a.wanted[name]
	return !wanted
}

// afterPass heals the names of image events that came while the pass ran,
// against the wanted set it has just set: the pass may have planned before
// they came. It reports whether a pass is needed for a name a pin list
// pattern matches.
func (a *Agent) afterPass(ctx context.Context, touched map[string]bool, timer Timer) bool {
	var due []hfruntime.Want
	pass := false
	a.mu.Lock()
	for name, present := range touched {
		if w, ok := a.wanted[name]; ok {
			due = append(due, w)
		} else if present && a.pinMatchLocked(name) {
			pass = true
		}
	}
	for name := range a.foreign {
		if _, ok := a.wanted[name]; !ok {
			pass = true // pinned by another holdfast process during the pass
		}
	}
	a.foreign = map[string]bool{}
	a.mu.Unlock()
	for _, w := range due {
		a.heal(ctx, w, timer)
	}
	return pass
}

func (a *Agent) pinMatchLocked(name string) bool {
	for _, ps := range a.pinPatterns {
		for _, p := range ps {
			if p.Match(name) {
				return true
			}
		}
	}
	return false
}

// heal restores one wanted record from leased content, unless it is in backoff.
func (a *Agent) heal(ctx context.Context, want hfruntime.Want, timer Timer) {
	now := a.clock.Now()
	a.mu.Lock()
	st := a.heals[want.Name]
	if st == nil {
		st = &healState{wait: backoff.New(healFirstWait, healMaxDelay)}
		a.heals[want.Name] = st
	}
	if now.Before(st.until) {
		st.pending = true
		a.mu.Unlock()
		a.armHealTimer(timer)
		return
	}
	st.pending = false
	a.mu.Unlock()

	res, err := a.rt.Pin(ctx, want)
	if err != nil {
		a.log.Error("heal", "name", want.Name, "error", err)
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
		a.rec.Drift()
	}
	a.rec.Healed(cause)
	a.log.Info("healed", "name", want.Name, "cause", cause)

	a.mu.Lock()
	defer a.mu.Unlock()
	kept := st.recent[:0]
	for _, t := range st.recent {
		if now.Sub(t) < healWindow {
			kept = append(kept, t)
		}
	}
	st.recent = append(kept, now)
	if len(st.recent) >= healBurst {
		if !st.wait.Started() {
			a.journal.Record(journal.Warning, journal.ReasonHealBackoff, fmt.Sprintf(
				"%s healed %d times within %s: something keeps removing or re-pointing it; healing it with backoff", want.Name, len(st.recent), healWindow))
		}
		st.until = now.Add(st.wait.Next())
		a.journal.Backoff(want.Name, st.until)
		if !st.warned {
			st.warned = true
			a.log.Warn("something keeps removing a pinned image; healing it with backoff (on containerd below 1.7.10 or 1.6.25, or a kubelet below 1.29, image GC does not see pins)",
				"name", want.Name, "heals", len(st.recent), "window", healWindow)
		}
	} else {
		st.wait.Reset()
	}
	a.rec.SetBackoff(a.backedOffLocked(now))
}

func (a *Agent) backedOffLocked(now time.Time) int {
	n := 0
	for _, st := range a.heals {
		if now.Before(st.until) {
			n++
		}
	}
	return n
}

// armHealTimer sets the timer to the earliest end of a pending backoff.
func (a *Agent) armHealTimer(timer Timer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var next time.Time
	for _, st := range a.heals {
		if st.pending && (next.IsZero() || st.until.Before(next)) {
			next = st.until
		}
	}
	if !next.IsZero() {
		timer.Reset(max(next.Sub(a.clock.Now()), time.Millisecond))
	}
}

// retryBackedOff heals the names whose backoff has ended.
func (a *Agent) retryBackedOff(ctx context.Context, timer Timer) {
	now := a.clock.Now()
	var due []hfruntime.Want
	a.mu.Lock()
	for name, st := range a.heals {
		if st.pending && !now.Before(st.until) {
			if w, ok := a.wanted[name]; ok {
				due = append(due, w)
			}
			st.pending = false
		}
	}
	a.mu.Unlock()
	for _, w := range due {
		a.heal(ctx, w, timer)
	}
	a.armHealTimer(timer)
}

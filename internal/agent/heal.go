package agent

import (
	"context"
	"time"

	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
)

// Heal backoff: a name healed more than healBurst times within healWindow
// waits before the next heal, twice as long each time, up to healMaxDelay. On
// a containerd whose CRI does not report pins, the kubelet deletes, holdfast
// heals, and so on: that must cost little and say so once.
const (
	healBurst    = 3
	healWindow   = time.Minute
	healMaxDelay = 5 * time.Minute
)

type healState struct {
	recent  []time.Time
	until   time.Time
	delay   time.Duration
	pending bool
	warned  bool
}

// onImageEvent heals a wanted record that an event says changed.
func (a *Agent) onImageEvent(ctx context.Context, ev hfruntime.ImageEvent, timer *time.Timer) {
	if hfruntime.IsCRIRecord(ev.Name) {
		return
	}
	want, ok := a.wantedFor(ev.Name)
	if !ok {
		return
	}
	if ev.Kind == hfruntime.ImageCreated && ev.Labels[hfruntime.LabelCRIPinned] == hfruntime.PinnedValue &&
		ev.Labels[hfruntime.LabelPinned] == hfruntime.PinnedValue {
		return // a create with both labels is holdfast's own
	}
	a.heal(ctx, want, timer)
}

// heal restores one wanted record from leased content, unless it is in backoff.
func (a *Agent) heal(ctx context.Context, want hfruntime.Want, timer *time.Timer) {
	now := time.Now()
	a.mu.Lock()
	st := a.heals[want.Name]
	if st == nil {
		st = &healState{}
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
	if len(st.recent) > healBurst {
		if st.delay == 0 {
			st.delay = time.Second
		} else {
			st.delay = min(st.delay*2, healMaxDelay)
		}
		st.until = now.Add(st.delay)
		if !st.warned {
			st.warned = true
			a.log.Warn("something keeps removing a pinned image; healing it with backoff (on containerd below 1.7.10 or 1.6.25, or a kubelet below 1.29, image GC does not see pins)",
				"name", want.Name, "heals", len(st.recent), "window", healWindow)
		}
	} else {
		st.delay = 0
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
func (a *Agent) armHealTimer(timer *time.Timer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var next time.Time
	for _, st := range a.heals {
		if st.pending && (next.IsZero() || st.until.Before(next)) {
			next = st.until
		}
	}
	if !next.IsZero() {
		timer.Reset(max(time.Until(next), time.Millisecond))
	}
}

// retryBackedOff heals the names whose backoff has ended.
func (a *Agent) retryBackedOff(ctx context.Context, timer *time.Timer) {
	now := time.Now()
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

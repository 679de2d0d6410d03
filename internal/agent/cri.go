package agent

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/holdfast-project/holdfast/internal/backoff"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
)

// criWait is how the agent, once its first pass is final, waits for the CRI
// (what the kubelet asks) to see the images it pinned before it says it is
// ready: the CRI learns of records from containerd's events, a moment later.
type criWait struct {
	timer  Timer
	wait   backoff.Backoff // until the next look: criFirstDelay, doubling up to criMaxDelay
	since  time.Time       // the first look
	noted  bool            // "no CRI" was logged
	waited bool            // waiting for the CRI was logged
}

const (
	criFirstDelay = 100 * time.Millisecond
	criMaxDelay   = 2 * time.Second
	// criPatience bounds the wait: a CRI that never sees an image (one whose
	// content it cannot load, say) must not keep the node's kubelet, which
	// systemd starts after holdfast is ready, from ever starting.
	criPatience = 2 * time.Minute
)

// awaitCRI makes the agent ready, and calls onReady, when the CRI sees every
// image the agent pinned and wants; otherwise it says why not and looks again
// when w's timer fires. A store without a CRI has nothing to wait for.
func (a *Agent) awaitCRI(ctx context.Context, w *criWait, onReady func()) {
	// The loop heals while it waits here: a CRI that hangs must not stop it.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	missing, err := a.criMissing(cctx)
	cancel()
	switch {
	case errors.Is(err, hfruntime.ErrNoCRI):
		if !w.noted {
			w.noted = true
			a.log.Info("no CRI image service here (a namespace other than k8s.io, or containerd's CRI plugin disabled): readiness does not wait for the CRI", "error", err)
		}
	case err != nil:
		a.readyState.Store(fmt.Sprintf("asking the CRI which images it sees: %v", err))
		w.again()
		return
	case len(missing) > 0:
		shown := missing
		if len(shown) > 5 {
			shown = shown[:5]
		}
		if w.since.IsZero() {
			w.since = a.clock.Now()
		}
		if a.clock.Now().Sub(w.since) >= criPatience {
			a.log.Warn("the CRI still does not see some pinned images; ready all the same (holdfast status shows them as unseen)",
				"images", len(missing), "first", shown, "waited", criPatience)
			break
		}
		why := fmt.Sprintf("waiting for the CRI to see %d image(s): %v", len(missing), shown)
		a.readyState.Store(why)
		if !w.waited {
			w.waited = true
			a.log.Info(why)
		}
		w.again()
		return
	}
	a.ready.Store(true)
	if onReady != nil {
		onReady()
	}
}

func (w *criWait) again() {
	w.timer.Reset(w.wait.Next())
}

// criMissing lists the wanted names whose record holdfast pinned that the CRI
// does not see yet. A wanted name without such a record (its pin failed) is
// not waited for: the pass reports that failure.
func (a *Agent) criMissing(ctx context.Context) ([]string, error) {
	a.mu.Lock()
	wanted := make(map[string]bool, len(a.wanted))
	for n := range a.wanted {
		wanted[n] = true
	}
	a.mu.Unlock()
	if len(wanted) == 0 {
		return nil, nil
	}
	recs, err := a.rt.Records(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, r := range recs {
		if wanted[r.Name] && r.Owned() {
			names = append(names, r.Name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	seen, err := a.rt.CRIImages(ctx, names)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, n := range names {
		if !seen[n].Seen {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	return missing, nil
}

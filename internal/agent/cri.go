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

// criWait is how readiness, once the first pass is final, waits for the CRI
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
// when the wait's timer fires. A store without a CRI has nothing to wait for.
func (r *readiness) awaitCRI(ctx context.Context, onReady func()) {
	// A CRI that hangs must not keep readiness from ever saying why.
	w := &r.cri
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	missing, err := r.criMissing(cctx)
	cancel()
	switch {
	case errors.Is(err, hfruntime.ErrNoCRI):
		if !w.noted {
			w.noted = true
			r.log.Info("no CRI image service here (a namespace other than k8s.io, or containerd's CRI plugin disabled): readiness does not wait for the CRI", "error", err)
		}
	case err != nil:
		r.waiting(fmt.Sprintf("asking the CRI which images it sees: %v", err))
		w.again()
		return
	case len(missing) > 0:
		shown := missing
		if len(shown) > 5 {
			shown = shown[:5]
		}
		if w.since.IsZero() {
			w.since = r.clock.Now()
		}
		if r.clock.Now().Sub(w.since) >= criPatience {
			r.log.Warn("the CRI still does not see some pinned images; ready all the same (holdfast status shows them as unseen)",
				"images", len(missing), "first", shown, "waited", criPatience)
			break
		}
		why := fmt.Sprintf("waiting for the CRI to see %d image(s): %v", len(missing), shown)
		r.waiting(why)
		if !w.waited {
			w.waited = true
			r.log.Info(why)
		}
		w.again()
		return
	}
	r.mu.Lock()
	r.ready = true
	r.mu.Unlock()
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
func (r *readiness) criMissing(ctx context.Context) ([]string, error) {
	wanted := r.wanted()
	if len(wanted) == 0 {
		return nil, nil
	}
	recs, err := r.rt.Records(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, rec := range recs {
		if wanted[rec.Name] && rec.Owned() {
			names = append(names, rec.Name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	seen, err := r.rt.CRIImages(ctx, names)
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

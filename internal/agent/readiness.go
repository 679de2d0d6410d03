package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/holdfast-project/holdfast/internal/backoff"
	"github.com/holdfast-project/holdfast/internal/pass"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
)

// readiness is what /readyz and the report say: not ready until every
// source of the first pass is final and the CRI sees what the agent pinned
// (cri.go), and not while containerd's event stream is lost.
type readiness struct {
	rt     hfruntime.Runtime
	wanted func() map[string]bool // the names of the wanted set as it stands
	clock  Clock
	log    *slog.Logger
	final  chan struct{} // the first pass is final: wait for the CRI
	cri    criWait

	mu    sync.Mutex
	first bool   // the first pass is final
	ready bool   // and the CRI has seen its images
	why   string // why not ready
	lost  bool   // containerd's event stream is lost: reconnecting
}

func newReadiness(rt hfruntime.Runtime, wanted func() map[string]bool, clock Clock, log *slog.Logger) *readiness {
	return &readiness{rt: rt, wanted: wanted, clock: clock, log: log, final: make(chan struct{}, 1),
		cri: criWait{timer: clock.NewTimer(), wait: backoff.New(criFirstDelay, criMaxDelay)},
		why: "the first pass has not finished"}
}

// state is Agent.Ready.
func (r *readiness) state() (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.lost:
		return false, "containerd does not answer: reconnecting"
	case r.ready:
		return true, "ready"
	}
	return false, r.why
}

// passed takes a pass's result: until the first pass whose sources are
// all final (none still being written), it says what the node waits for.
func (r *readiness) passed(res pass.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first {
		return
	}
	if len(res.Settling) == 0 {
		r.first = true
		r.final <- struct{}{}
		return
	}
	r.why = fmt.Sprintf("waiting for %d source(s) of the first pass still being written: %v", len(res.Settling), res.Settling)
}

// setLost says whether containerd's event stream is lost.
func (r *readiness) setLost(lost bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost = lost
}

// waiting says why the node is not ready yet.
func (r *readiness) waiting(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.why = why
}

// run waits, once the first pass is final, for the CRI to see its images
// (awaitCRI), until ctx ends.
func (r *readiness) run(ctx context.Context, onReady func()) {
	defer r.cri.timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.final:
			r.awaitCRI(ctx, onReady)
		case <-r.cri.timer.C():
			r.awaitCRI(ctx, onReady)
		}
	}
}

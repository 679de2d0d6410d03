package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-project/holdfast/internal/metrics"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
)

// Recorder receives what the agent does, for metrics. *metrics.Metrics is one.
type Recorder interface {
	ImportDone(result string, bytes int64, d time.Duration)
	PullDone(result string)
	Healed(cause string)
	Drift()
	Unpinned(n int)
	Released(n int)
	SetPinned(n int)
	ReconcileDone(d time.Duration, ok bool)
	SetConnected(bool)
	SetBackoff(n int)
	SetSources(counts map[metrics.SourceKey]int)
}

type noRecorder struct{}

func (noRecorder) ImportDone(string, int64, time.Duration) {}
func (noRecorder) PullDone(string)                         {}
func (noRecorder) Healed(string)                           {}
func (noRecorder) Drift()                                  {}
func (noRecorder) Unpinned(int)                            {}
func (noRecorder) Released(int)                            {}
func (noRecorder) SetPinned(int)                           {}
func (noRecorder) ReconcileDone(time.Duration, bool)       {}
func (noRecorder) SetConnected(bool)                       {}
func (noRecorder) SetBackoff(int)                          {}
func (noRecorder) SetSources(map[metrics.SourceKey]int)    {}

// Agent is holdfast's daemon: it keeps containerd's records and leases in line
// with the images dirs, passes triggered by start-up, directory changes, a
// timer and reconnects; and it heals wanted records the moment an image event
// says they changed.
type Agent struct {
	rt  hfruntime.Runtime
	cfg Config
	log *slog.Logger
	rec Recorder

	mu     sync.Mutex
	wanted map[string]hfruntime.Want // what the last plan wants: heal restores these
	failed map[string]failure        // sources whose import failed, by path
	heals  map[string]*healState     // per-name heal history, for backoff

	ready      atomic.Bool
	readyState atomic.Value // string: why not ready
}

type failure struct {
	identity string
	retryAt  time.Time
	delay    time.Duration
	err      error
}

// New makes an agent. rec may be nil.
func New(rt hfruntime.Runtime, cfg Config, rec Recorder) *Agent {
	if rec == nil {
		rec = noRecorder{}
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{rt: rt, cfg: cfg, log: log, rec: rec,
		wanted: map[string]hfruntime.Want{}, failed: map[string]failure{}, heals: map[string]*healState{}}
	a.readyState.Store("the first pass has not finished")
	return a
}

// Ready reports whether every source of the first pass has reached a final
// state (imported, unchanged or failed), and if not, why.
func (a *Agent) Ready() (bool, string) {
	if a.ready.Load() {
		return true, "ready"
	}
	return false, a.readyState.Load().(string)
}

func (a *Agent) setWanted(w map[string]hfruntime.Want) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.wanted = w
}

func (a *Agent) wantedFor(name string) (hfruntime.Want, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w, ok := a.wanted[name]
	return w, ok
}

// noteFailure remembers a failed source so that the loop retries it with
// backoff, or at once when it changes.
func (a *Agent) noteFailure(path, identity string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.failed[path]
	if f.identity != identity {
		f = failure{identity: identity, delay: 5 * time.Second}
	} else {
		f.delay = min(f.delay*2, 5*time.Minute)
	}
	f.retryAt = time.Now().Add(f.delay)
	a.failed[path] = f
}

func (a *Agent) clearFailure(path string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.failed, path)
}

// Run runs the agent until ctx ends. It subscribes to image events before the
// first pass lists anything, so a deletion after the listing is healed from
// its event (one in the few milliseconds before the stream is live waits for
// the next full pass). A lost event stream is resubscribed with backoff,
// followed by a full pass.
func (a *Agent) Run(ctx context.Context, onReady func()) error {
	events, streamErr := a.rt.WatchImages(ctx)
	a.rec.SetConnected(true)

	w, err := newWatcher(a.cfg.ImageDirs, a.cfg.Settle, a.log)
	if err != nil {
		return err
	}
	defer w.Close()

	trigger := make(chan string, 1)
	kick := func(why string) {
		select {
		case trigger <- why:
		default:
		}
	}
	passDone := make(chan passResult, 1)
	var passWG sync.WaitGroup
	passWG.Add(1)
	go func() {
		defer passWG.Done()
		a.passLoop(ctx, trigger, passDone)
	}()
	defer passWG.Wait()
	kick("start")

	resync := a.cfg.Resync
	if resync <= 0 {
		resync = 5 * time.Minute
	}
	ticker := time.NewTicker(resync)
	defer ticker.Stop()
	var retry *time.Timer
	retryC := func() <-chan time.Time {
		if retry == nil {
			return nil
		}
		return retry.C
	}
	healTimer := time.NewTimer(time.Hour)
	healTimer.Stop()
	initial := true

	for {
		select {
		case <-ctx.Done():
			return nil
		case why := <-w.Events():
			a.log.Debug("images dir changed", "what", why)
			kick("watch")
		case <-ticker.C:
			w.Refresh() // a resync watches again what went unwatched
			kick("resync")
		case <-retryC():
			retry = nil
			kick("retry")
		case pr := <-passDone:
			if len(pr.pending) > 0 {
				wait := time.Until(pr.nextCheck) + 100*time.Millisecond
				retry = time.NewTimer(max(wait, 100*time.Millisecond))
			}
			if initial {
				if len(pr.settling) == 0 {
					initial = false
					a.ready.Store(true)
					if onReady != nil {
						onReady()
					}
				} else {
					a.readyState.Store(fmt.Sprintf("waiting for %d source(s) of the first pass still being written: %v", len(pr.settling), pr.settling))
				}
			}
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			a.onImageEvent(ctx, ev, healTimer)
		case <-healTimer.C:
			a.retryBackedOff(ctx, healTimer)
		case err := <-streamErr:
			a.rec.SetConnected(false)
			a.log.Warn("lost containerd's event stream; reconnecting", "error", err)
			events, streamErr = a.resubscribe(ctx)
			if ctx.Err() != nil {
				return nil
			}
			a.rec.SetConnected(true)
			a.log.Info("reconnected to containerd")
			kick("reconnect")
		}
	}
}

// passLoop runs passes one at a time as triggers arrive.
func (a *Agent) passLoop(ctx context.Context, trigger <-chan string, done chan<- passResult) {
	for {
		select {
		case <-ctx.Done():
			return
		case why := <-trigger:
			sum, pr := a.pass(ctx, passOptions{settle: true, memo: why != "resync"})
			for _, f := range sum.Failures {
				a.log.Error("pass", "error", f)
			}
			a.log.Info("pass: "+sum.String(), "trigger", why, "pending", len(pr.pending))
			select {
			case done <- pr:
			case <-ctx.Done():
				return
			}
		}
	}
}

// resubscribe waits, with backoff, until containerd answers, then subscribes again.
func (a *Agent) resubscribe(ctx context.Context) (<-chan hfruntime.ImageEvent, <-chan error) {
	delay := 200 * time.Millisecond
	for {
		if ctx.Err() != nil {
			return nil, nil
		}
		if _, err := a.rt.Server(ctx); err == nil {
			return a.rt.WatchImages(ctx)
		} else {
			a.log.Debug("containerd not answering yet", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(delay):
		}
		delay = min(delay*2, 10*time.Second)
	}
}

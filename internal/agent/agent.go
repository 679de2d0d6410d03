package agent

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-project/holdfast/internal/importer"
	"github.com/holdfast-project/holdfast/internal/journal"
	"github.com/holdfast-project/holdfast/internal/metrics"
	"github.com/holdfast-project/holdfast/internal/pattern"
	"github.com/holdfast-project/holdfast/internal/reconcile"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/source"
	"github.com/holdfast-project/holdfast/internal/watch"
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
	rt    hfruntime.Runtime
	store importer.Store // what imports write to
	cfg   Config
	log   *slog.Logger
	rec   Recorder

	clock   Clock
	journal *journal.Journal // what GET /report tells

	mu     sync.Mutex
	wanted map[string]hfruntime.Want // what the last plan wants: heal restores these
	// actions, in a dry run only (DryRun), records what the pass would do.
	actions *actionLog
	failed  map[string]failure // sources whose import failed, by path
	// pullFailed are the pull list references whose pull failed, by reference.
	pullFailed map[string]failure
	heals      map[string]*healState // per-name heal history, for backoff
	seen       map[string]sighting   // when a pass first saw each source as it is; passes only
	// Image events a pass may not have seen: from its start (or the agent's)
	// until it sets the wanted set, the names of image events are kept
	// (true: created or updated), to be healed against the new wanted set;
	// imageEvents counts every event, so a pass knows its listing is stale.
	collecting  bool
	touched     map[string]bool
	imageEvents uint64
	pinPatterns map[string][]pattern.Pattern // the last pass's pin list patterns, by list path
	kept        map[string]bool              // the wanted names kept sources want (holdfast import)
	foreign     map[string]bool              // names pinned by another holdfast process during a pass

	ready      atomic.Bool
	readyState atomic.Value // string: why not ready
	lost       atomic.Bool  // containerd's event stream is lost: reconnecting
}

type failure struct {
	identity string
	retryAt  time.Time
	wait     backoff
	err      error
}

// New makes an agent. rec may be nil.
func New(rt importer.Backend, cfg Config, rec Recorder) *Agent {
	if rec == nil {
		rec = noRecorder{}
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{rt: rt, store: rt.ImportStore(), cfg: cfg, log: log, rec: rec, clock: realClock{},
		wanted: map[string]hfruntime.Want{}, failed: map[string]failure{}, pullFailed: map[string]failure{}, heals: map[string]*healState{},
		collecting: true, touched: map[string]bool{}, pinPatterns: map[string][]pattern.Pattern{}, foreign: map[string]bool{}}
	a.journal = journal.New(journal.DefaultSize, func() time.Time { return a.clock.Now() })
	a.readyState.Store("the first pass has not finished")
	return a
}

// Ready reports whether every source of the first pass has reached a final
// state (imported, unchanged or failed) and the CRI sees every image pinned
// (unless there is no CRI), and containerd answers; and if not, why.
func (a *Agent) Ready() (bool, string) {
	if a.lost.Load() {
		return false, "containerd does not answer: reconnecting"
	}
	if a.ready.Load() {
		return true, "ready"
	}
	return false, a.readyState.Load().(string)
}

// setWanted makes w the wanted set: from now on image events are healed
// against it, and no longer kept for the pass.
func (a *Agent) setWanted(w map[string]hfruntime.Want) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.wanted = w
	a.collecting = false
}

// wantDuringPins sets the wanted set while a plan's pins are applied: every
// name the plan wants but those it pins for the first time. An event heal
// must not pin such a name before the pass does, as only the first pin
// notices a user's own pin that was there before. Image events keep being
// collected until setWanted, and are healed after the pass.
func (a *Agent) wantDuringPins(plan reconcile.Plan) {
	w := maps.Clone(plan.WantedNames)
	for _, p := range plan.Pins {
		if p.Reason == reconcile.ReasonNew {
			delete(w, p.Want.Name)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.wanted = w
}

// beginPass starts keeping the names of image events for a pass, and returns
// the event count for eventsSince.
func (a *Agent) beginPass() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.collecting = true
	return a.imageEvents
}

// eventsSince reports whether image events came after beginPass returned n:
// records listed before then may be stale.
func (a *Agent) eventsSince(n uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.imageEvents != n
}

// takeTouched returns the names of the image events kept so far, and forgets them.
func (a *Agent) takeTouched() map[string]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.touched
	a.touched = map[string]bool{}
	return t
}

// noteFailure remembers a failed source, and why, so that the loop retries it
// with backoff, or at once when it changes.
func (a *Agent) noteFailure(path, identity string, cause error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.failed[path]
	if f.identity != identity || !f.wait.started() {
		f = failure{identity: identity, wait: backoff{first: 5 * time.Second, most: 5 * time.Minute}}
	}
	f.retryAt = a.clock.Now().Add(f.wait.next())
	f.err = cause
	a.failed[path] = f
}

// failedUntil says until when a source that failed at this identity waits
// before its next try.
func (a *Agent) failedUntil(path, identity string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f, ok := a.failed[path]
	if !ok || f.identity != identity || !f.retryAt.After(a.clock.Now()) {
		return time.Time{}, false
	}
	return f.retryAt, true
}

// nextRetry is the earliest time a failure still waits for: of a scanned
// source whose import failed, or of a pull list reference. Zero if none.
// The failures of sources that are gone are forgotten.
func (a *Agent) nextRetry(srcs []source.Source) time.Time {
	scanned := map[string]bool{}
	for _, s := range srcs {
		scanned[s.Path] = true
	}
	now := a.clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	var next time.Time
	for path, f := range a.failed {
		if !scanned[path] {
			delete(a.failed, path) // a source that is gone
			continue
		}
		if f.retryAt.After(now) && (next.IsZero() || f.retryAt.Before(next)) {
			next = f.retryAt
		}
	}
	for _, f := range a.pullFailed {
		if f.retryAt.After(now) && (next.IsZero() || f.retryAt.Before(next)) {
			next = f.retryAt
		}
	}
	return next
}

func (a *Agent) clearFailure(path string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.failed, path)
}

// Run runs the agent until ctx ends. It subscribes to image events before the
// first pass lists anything, so a deletion after the listing is healed from
// its event (one in the few milliseconds before the stream is live waits for
// the next full pass); an event that comes while a pass runs is healed
// against the wanted set that pass makes. A source whose import failed, and a
// pull list reference that failed, are tried again when their backoff ends.
// A lost event stream is resubscribed with backoff, followed by a full pass.
func (a *Agent) Run(ctx context.Context, onReady func()) error {
	for _, off := range a.cfg.FeaturesOff {
		a.journal.Record(journal.Warning, journal.ReasonFeatureOff, off)
	}
	events, streamErr := a.rt.WatchImages(ctx)
	a.rec.SetConnected(true)

	w, err := watch.New(append(append([]string{}, a.cfg.ImageDirs...), a.cfg.SpoolDirs...), a.cfg.Settle, a.log)
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
	retry := a.clock.NewTimer()
	defer retry.Stop()
	healTimer := a.clock.NewTimer()
	defer healTimer.Stop()
	initial := true
	cri := &criWait{timer: a.clock.NewTimer(), wait: backoff{first: criFirstDelay, most: criMaxDelay}} // after the first pass, until the CRI sees its images
	defer cri.timer.Stop()

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
		case <-retry.C():
			kick("retry")
		case pr := <-passDone:
			// Sources still being written, and failed imports and pulls, are
			// looked at again when due.
			if pr.nextCheck.IsZero() {
				retry.Stop()
			} else {
				retry.Reset(max(pr.nextCheck.Sub(a.clock.Now())+100*time.Millisecond, 100*time.Millisecond))
			}
			if a.afterPass(ctx, pr.touched, healTimer) {
				kick("pin pattern")
			}
			if initial {
				if len(pr.settling) == 0 {
					initial = false
					a.awaitCRI(ctx, cri, onReady)
				} else {
					a.readyState.Store(fmt.Sprintf("waiting for %d source(s) of the first pass still being written: %v", len(pr.settling), pr.settling))
				}
			}
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if a.onImageEvent(ctx, ev, healTimer) {
				kick("pin pattern")
			}
		case <-healTimer.C():
			a.retryBackedOff(ctx, healTimer)
		case <-cri.timer.C():
			a.awaitCRI(ctx, cri, onReady)
		case err := <-streamErr:
			a.rec.SetConnected(false)
			a.lost.Store(true)
			a.log.Warn("lost containerd's event stream; reconnecting", "error", err)
			events, streamErr = a.resubscribe(ctx)
			if ctx.Err() != nil {
				return nil
			}
			a.rec.SetConnected(true)
			a.lost.Store(false)
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
	wait := backoff{first: 200 * time.Millisecond, most: 10 * time.Second}
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
		case <-time.After(wait.next()):
		}
	}
}

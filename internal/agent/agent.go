// Package agent is holdfast's daemon (holdfast run): it runs passes (package
// pass) on start-up, on changes to the images and spool dirs, on a timer, on
// retries and on reconnects, one at a time; between them it heals, from its
// lease, every wanted record an image event says was deleted or re-pointed,
// against the wanted set the last pass handed over; and it says when the node
// is ready.
package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-project/holdfast/internal/backoff"
	"github.com/holdfast-project/holdfast/internal/journal"
	"github.com/holdfast-project/holdfast/internal/pass"
	"github.com/holdfast-project/holdfast/internal/pattern"
	"github.com/holdfast-project/holdfast/internal/report"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/watch"
)

// Config is the daemon's configuration: what its passes need, and how often
// it runs a full pass on its own.
type Config struct {
	pass.Config
	Resync time.Duration // a full pass at least this often
	// FeaturesOff say, each, which feature runs off because a path it needs
	// is missing: Run records each as a Warning event (FeatureOff).
	FeaturesOff []string
	// PullRequired: the images of the required set the node lacks are
	// pulled through its registry mirrors (its peers), pinned and leased as
	// the peer source (pass.Config.PeerList), and released PeerGrace after
	// they leave the set. The peer source is kept also when PullRequired is
	// off, so that what it held before is released.
	PullRequired bool
	PeerGrace    time.Duration
}

// Recorder receives what the daemon and its passes do, for metrics.
// *metrics.Metrics is one.
type Recorder interface {
	pass.Recorder
	SetConnected(bool)
	// SetRequired counts the required images by state.
	SetRequired(counts map[report.State]int)
	SetBackoff(n int)
}

type noRecorder struct{ pass.NoRecorder }

func (noRecorder) SetConnected(bool)                {}
func (noRecorder) SetBackoff(int)                   {}
func (noRecorder) SetRequired(map[report.State]int) {}

// Agent is holdfast's daemon: it keeps containerd's records and leases in line
// with the images dirs, passes triggered by start-up, directory changes, a
// timer and reconnects; and it heals wanted records the moment an image event
// says they changed.
type Agent struct {
	rt     hfruntime.Runtime
	passes *pass.Runner // runs the passes, and hands each one's outcome over (Handoff)
	cfg    Config
	log    *slog.Logger
	rec    Recorder

	clock   Clock
	journal *journal.Journal // what GET /report tells

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

	req      requiredState  // the images the node's workloads need (mu)
	reqKick  chan struct{}  // judge the required images again
	reqJudge sync.Mutex     // one judgment of them at a time
	peers    peerList       // the peer source (reqJudge)
	peerDue  chan time.Time // when the peer list's next grace ends
	pulled   chan struct{}  // a pull beside the passes completed: run a pass

	ready      atomic.Bool
	readyState atomic.Value // string: why not ready
	lost       atomic.Bool  // containerd's event stream is lost: reconnecting
}

// New makes an agent. rec may be nil.
func New(rt hfruntime.Backend, cfg Config, rec Recorder) *Agent {
	if rec == nil {
		rec = noRecorder{}
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{rt: rt, cfg: cfg, log: log, rec: rec, clock: realClock{},
		wanted: map[string]hfruntime.Want{}, heals: map[string]*healState{},
		collecting: true, touched: map[string]bool{}, pinPatterns: map[string][]pattern.Pattern{}, foreign: map[string]bool{},
		reqKick: make(chan struct{}, 1), peerDue: make(chan time.Time, 1), pulled: make(chan struct{}, 1)}
	now := func() time.Time { return a.clock.Now() }
	a.journal = journal.New(journal.DefaultSize, now)
	onPulled := func() {
		select {
		case a.pulled <- struct{}{}:
		default:
		}
	}
	a.passes = pass.New(rt, cfg.Config, pass.WithRecorder(rec), pass.WithClock(now), pass.WithJournal(a.journal), pass.WithHandoff(a),
		pass.WithBackgroundPulls(onPulled))
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

// Run runs the agent until ctx ends. It subscribes to image events before the
// first pass lists anything, so a deletion after the listing is healed from
// its event (one in the few milliseconds before the stream is live waits for
// the next full pass); an event that comes while a pass runs is healed
// against the wanted set that pass makes. A source whose import failed is
// tried again when its backoff ends. Pull lists are pulled beside the
// passes, each reference with its own backoff, and a pass runs when a pull
// completes: no pull ever holds a pass.
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
	passDone := make(chan passDone, 1)
	var passWG sync.WaitGroup
	passWG.Go(func() { a.passLoop(ctx, trigger, passDone) })
	// Pull lists are pulled beside the passes: a pass asks for what it
	// lacks and never waits; a pull that completes brings on a pass.
	passWG.Go(func() { a.passes.RunPulls(ctx) })
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
	peerTimer := a.clock.NewTimer()
	defer peerTimer.Stop()
	initial := true
	cri := &criWait{timer: a.clock.NewTimer(), wait: backoff.New(criFirstDelay, criMaxDelay)} // after the first pass, until the CRI sees its images
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
		case <-a.pulled:
			kick("pulled")
		case pr := <-passDone:
			// Sources still being written, and failed imports and pulls, are
			// looked at again when due.
			if pr.NextCheck.IsZero() {
				retry.Stop()
			} else {
				retry.Reset(max(pr.NextCheck.Sub(a.clock.Now())+100*time.Millisecond, 100*time.Millisecond))
			}
			if a.afterPass(ctx, pr.touched, healTimer) {
				kick("pin pattern")
			}
			a.kickRequired()
			if initial {
				if len(pr.Settling) == 0 {
					initial = false
					a.awaitCRI(ctx, cri, onReady)
				} else {
					a.readyState.Store(fmt.Sprintf("waiting for %d source(s) of the first pass still being written: %v", len(pr.Settling), pr.Settling))
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
			a.kickRequired()
		case <-a.reqKick:
			a.judgeRequired(ctx)
		case due := <-a.peerDue:
			peerTimer.Reset(max(due.Sub(a.clock.Now()), 0) + 100*time.Millisecond)
		case <-peerTimer.C():
			a.judgeRequired(ctx)
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

// passDone is what the loop learns of a pass: its result, and the names of
// the image events that came while it ran, which heal takes up once the
// pass has handed over its wanted set.
type passDone struct {
	pass.Result
	touched map[string]bool
}

// passLoop runs passes one at a time as triggers arrive.
func (a *Agent) passLoop(ctx context.Context, trigger <-chan string, done chan<- passDone) {
	for {
		select {
		case <-ctx.Done():
			return
		case why := <-trigger:
			sum, res := a.passes.Run(ctx, pass.Options{Settle: true, Memo: why != "resync"})
			for _, f := range sum.Failures {
				a.log.Error("pass", "error", f)
			}
			a.log.Info("pass: "+sum.String(), "trigger", why, "pending", len(res.Pending))
			select {
			case done <- passDone{Result: res, touched: a.takeTouched()}:
			case <-ctx.Done():
				return
			}
		}
	}
}

// resubscribe waits, with backoff, until containerd answers, then subscribes again.
func (a *Agent) resubscribe(ctx context.Context) (<-chan hfruntime.ImageEvent, <-chan error) {
	wait := backoff.New(200*time.Millisecond, 10*time.Second)
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
		case <-time.After(wait.Next()):
		}
	}
}

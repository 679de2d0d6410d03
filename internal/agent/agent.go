// Package agent is holdfast's daemon (holdfast run): it runs passes (package
// pass) on start-up, on changes to the images and spool dirs, on a timer, on
// retries and on reconnects, one at a time; between them it heals, from its
// lease, every wanted record an image event says was deleted or re-pointed,
// against the wanted set the last pass handed over; and it says when the node
// is ready.
//
// An Agent is made of parts, each with its own state and its own lock, in a
// file of its own: the loop of passes (loop.go), heal (heal.go, with what
// each pass hands it in handoff.go), the required images (required.go) and
// the peer source they feed (peers.go), and readiness (readiness.go,
// cri.go). Run starts them together; none reads another's state but
// through its methods. Daemon runs the agent beside the daemon's other parts
// and tells the service manager how it goes (daemon.go).
package agent

import (
	"context"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/holdfast-project/holdfast/internal/backoff"
	"github.com/holdfast-project/holdfast/internal/journal"
	"github.com/holdfast-project/holdfast/internal/pass"
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
	// SetLists is the dir of the ImageSets' lists (sets.go), each pulled,
	// pinned and leased like the peer list and released PeerGrace after its
	// set no longer wants an image; "" keeps none.
	SetLists string
	// PeerMirror is the node's peer mirror as its peers reach it
	// (scheme://host:port, from --peer-mirror): the report names it, so
	// that the waves send other nodes' pulls of what it holds here; ""
	// without one.
	PeerMirror string
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
	rt      hfruntime.Runtime
	cfg     Config
	log     *slog.Logger
	rec     Recorder
	journal *journal.Journal // what GET /report tells

	passes   *pass.Runner // runs the passes, and hands each one's outcome over (Handoff)
	loop     *loop        // the passes, one at a time, and what brings them on
	heal     *healer      // wanted records put back between passes
	required *required    // the images the node's workloads need
	peers    *peerSource  // the peer source the required images feed
	sets     *sets        // the ImageSets' lists and where their images stand
	ready    *readiness   // what /readyz and the report say
}

// New makes an agent. rec may be nil.
func New(rt hfruntime.Backend, cfg Config, rec Recorder) *Agent {
	return newAgent(rt, cfg, rec, realClock{})
}

// newAgent makes an agent that decides backoffs and retries by clock.
func newAgent(rt hfruntime.Backend, cfg Config, rec Recorder, clock Clock) *Agent {
	if rec == nil {
		rec = noRecorder{}
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{rt: rt, cfg: cfg, log: log, rec: rec, journal: journal.New(journal.DefaultSize, clock.Now)}
	a.loop = newLoop(clock, log)
	a.passes = pass.New(rt, cfg.Config, pass.WithRecorder(rec), pass.WithClock(clock.Now), pass.WithJournal(a.journal), pass.WithHandoff(a),
		pass.WithBackgroundPulls(a.loop.pulled))
	a.heal = newHealer(rt, clock, log, rec, a.journal)
	a.peers = newPeerSource(cfg, clock, log)
	a.sets = newSets(rt, cfg, a.passes, func() { a.loop.kick("sets") }, clock, log)
	a.required = newRequired(rt, cfg.PullRequired, a.passes, a.peers, clock, log, rec, a.journal)
	a.ready = newReadiness(rt, a.heal.wantedNames, clock, log)
	return a
}

// Ready reports whether every source of the first pass has reached a final
// state (imported, unchanged or failed) and the CRI sees every image pinned
// (unless there is no CRI), and containerd answers; and if not, why.
func (a *Agent) Ready() (bool, string) { return a.ready.state() }

// Run runs the agent until ctx ends. It subscribes to image events before the
// first pass lists anything, so a deletion after the listing is healed from
// its event (one in the few milliseconds before the stream is live waits for
// the next full pass); an event that comes while a pass runs is healed
// against the wanted set that pass makes. A source whose import failed is
// tried again when its backoff ends. Pull lists are pulled beside the
// passes, each reference with its own backoff, and a pass runs when a pull
// completes: no pull ever holds a pass.
// A lost event stream is resubscribed with backoff, followed by a full pass.
//
// The parts run in one group until ctx ends; Run returns once every one has.
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

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { a.loop.run(gctx, a.passes, a.heal.takeTouched); return nil })
	// Pull lists are pulled beside the passes: a pass asks for what it
	// lacks and never waits; a pull that completes brings on a pass.
	g.Go(func() error { a.passes.RunPulls(gctx); return nil })
	g.Go(func() error { a.required.run(gctx); return nil })
	g.Go(func() error { a.sets.run(gctx); return nil })
	g.Go(func() error { a.ready.run(gctx, onReady); return nil })
	g.Go(func() error { a.steer(gctx, w, events, streamErr); return nil })
	a.loop.kick("start")
	return g.Wait()
}

// steer takes what happens to the agent, one thing at a time, to the part
// it concerns: a change in the dirs, the timer, a retry or a pull brings on
// a pass; a pass done is handed to heal, the required images and
// readiness; an image event is healed; a lost event stream is resubscribed.
func (a *Agent) steer(ctx context.Context, w *watch.Watcher, events <-chan hfruntime.ImageEvent, streamErr <-chan error) {
	resync := a.cfg.Resync
	if resync <= 0 {
		resync = 5 * time.Minute
	}
	ticker := time.NewTicker(resync)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case why := <-w.Events():
			a.log.Debug("images dir changed", "what", why)
			a.loop.kick("watch")
		case <-ticker.C:
			w.Refresh() // a resync watches again what went unwatched
			a.loop.kick("resync")
		case <-a.loop.retryDue():
			a.loop.kick("retry")
		case <-a.loop.pullDone():
			a.loop.kick("pulled")
		case pr := <-a.loop.done():
			// Sources still being written, and failed imports and pulls, are
			// looked at again when due.
			a.loop.retryAt(pr.NextCheck)
			if a.heal.afterPass(ctx, pr.touched) {
				a.loop.kick("pin pattern")
			}
			a.required.kick()
			a.sets.kick()
			a.ready.passed(pr.Result)
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if a.heal.onImageEvent(ctx, ev) {
				a.loop.kick("pin pattern")
			}
			a.required.kick()
			a.sets.kick()
		case <-a.heal.due():
			a.heal.retryBackedOff(ctx)
		case err := <-streamErr:
			a.rec.SetConnected(false)
			a.ready.setLost(true)
			a.log.Warn("lost containerd's event stream; reconnecting", "error", err)
			events, streamErr = a.resubscribe(ctx)
			if ctx.Err() != nil {
				return
			}
			a.rec.SetConnected(true)
			a.ready.setLost(false)
			a.log.Info("reconnected to containerd")
			a.loop.kick("reconnect")
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

// Package pass is holdfast's pass, and the use cases built on it: scan the
// images and spool dirs, import what changed, lease what the lists want, then
// plan with reconcile.Diff and apply the plan: pins first, then unpins, then
// releases. Sync runs one pass, DryRun runs one that writes nothing (holdfast
// plan), Keep and ReleaseKept are holdfast import and holdfast release,
// ReadStatus is holdfast status (its refusals the plan's own), and Verify
// reads a source as an import does for holdfast verify. The daemon (package agent) runs passes through a Runner, which remembers what
// passes must between them, and takes what each decided through a Handoff.
package pass

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/holdfast-project/holdfast/internal/journal"
	"github.com/holdfast-project/holdfast/internal/metrics"
	"github.com/holdfast-project/holdfast/internal/reconcile"
	"github.com/holdfast-project/holdfast/internal/registries"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/source"
	"github.com/holdfast-project/holdfast/internal/units"
)

// Config is what a pass needs to know.
type Config struct {
	ImageDirs []string
	// SpoolDirs take archives to import as kept sources: each is deleted
	// once its content is leased and its images pinned.
	SpoolDirs []string
	Parallel  int           // archives imported at once; 0 = a default from the CPU count
	Settle    time.Duration // with Options.Settle: a file is complete when unmodified this long
	// RegistryConfig is a hosts.toml directory (containerd's certs.d layout) for pulls.
	RegistryConfig string
	PullTimeout    time.Duration // for one pull of a pull list entry
	// PeerList is the peer source's path (holdfast run --pull-required): the
	// list there is read as kind source.Peers, whose failed pulls wait less
	// before their next try.
	PeerList string
	// Credentials per registry host for pulls (from K3s's registries.yaml).
	Credentials map[string]registries.Credential
	// InsecurePerms reads images dirs, spool dirs, lists and the policy's
	// files that users other than root and holdfast's own may change
	// (files.CheckPerms).
	InsecurePerms bool
	Log           *slog.Logger
	// Progress, when set, follows the bytes imports read from archive files.
	Progress Progress
	// Policy is the signature policy file ("" for none), read again before
	// each pass (a bad edit keeps the last good policy). Under enforce a
	// wanted image the policy refuses is not pinned; under warn its verdict
	// is reported.
	Policy string
}

// Progress wraps r, the archive at path (size bytes; of a split archive, its
// parts joined) as an import opens it, so that a display can follow how much
// of it is read. The import closes the returned reader when it is done with
// the file, read through or not.
type Progress func(path string, size int64, r io.ReadCloser) io.ReadCloser

// Summary is what one pass did.
type Summary struct {
	Imported  int // sources read and leased
	Unchanged int // sources whose lease was complete and intact: not read
	Healed    int // records restored from leased content
	Unpinned  int // records no source wants any more
	Deleted   int // records holdfast made of images the signature policy refuses
	Released  int // leases of sources that are gone or replaced
	Drift     int // records someone re-pointed, restored
	Conflicts []reconcile.Conflict
	Failed    int
	BytesRead int64
	Wanted    int     // names the sources want
	Images    int     // of those, names that are not name@digest: the images a person counts
	Failures  []error // each names the file and the cause
	Duration  time.Duration
	Spooled   []string // spool files imported, kept and removed

	states map[string]sourceState // by path
}

// sourceState is where one source stands after a pass.
type sourceState struct {
	kind  source.Kind
	state string // metrics.StateApplied, StateFailed or StatePending
}

func (s *Summary) set(src source.Source, state string) {
	if s.states == nil {
		s.states = map[string]sourceState{}
	}
	s.states[src.Path] = sourceState{kind: src.Kind, state: state}
}

// sourceCounts counts the sources by kind and state, for holdfast_sources.
func (s *Summary) sourceCounts() map[metrics.SourceKey]int {
	out := map[metrics.SourceKey]int{}
	for _, st := range s.states {
		out[metrics.SourceKey{Kind: string(st.kind), State: st.state}]++
	}
	return out
}

// String is the one-line summary sync prints.
func (s Summary) String() string {
	deleted := ""
	if s.Deleted > 0 {
		deleted = fmt.Sprintf("; %d records of refused images deleted", s.Deleted)
	}
	return fmt.Sprintf("%d imported, %d unchanged, %d healed, %d unpinned, %d failed; %d images pinned, %d released, %d drift, %d conflicts%s; %s read in %s",
		s.Imported, s.Unchanged, s.Healed, s.Unpinned, s.Failed, s.Wanted, s.Released, s.Drift, len(s.Conflicts), deleted,
		units.Bytes(s.BytesRead), s.Duration.Round(time.Millisecond))
}

// Sync runs one pass. Every source in the images dirs is imported unless its
// lease is complete and intact; then records are pinned, healed and unpinned
// and leases released as reconcile.Diff plans. One source failing never stops
// the others, and never unpins what it wanted before.
func Sync(ctx context.Context, rt hfruntime.Backend, cfg Config) Summary {
	sum, _ := New(rt, cfg).Run(ctx, Options{})
	return sum
}

// Options tune one pass: a one-shot sync uses none.
type Options struct {
	Settle bool // skip sources modified within cfg.Settle (still being written)
	Memo   bool // skip sources that failed before with the same identity, until their retry time
}

// Result is what the daemon needs to know after a pass.
type Result struct {
	Pending   []string  // sources not final yet: still being written, or waiting for a retry
	Settling  []string  // of those, the ones still being written
	NextCheck time.Time // when a pending source, a failed import or a failed pull is due
}

// Runner runs passes over one backend, one at a time, and remembers between
// them what passes must: the sources whose import failed and the pull list
// references whose pull failed (each retried with backoff), and when each
// source was first seen as it is (the settle rule). Its passes run one at a
// time: Run must not be called again before it returns.
type Runner struct {
	rt      hfruntime.Runtime
	store   hfruntime.Store // what imports write to
	cfg     Config
	log     *slog.Logger
	rec     Recorder
	now     func() time.Time // for settling and retries
	journal *journal.Journal
	hand    Handoff
	sigs    signatures

	mu         sync.Mutex
	failed     map[string]failure // sources whose import failed, by path
	pullFailed map[string]failure // pull list references whose pull failed, by reference
	refusals   map[string]string  // names the signature policy refused in the last pass: why
	seen       map[string]sighting
	// actions, in a dry run only (DryRun), records what the pass would do.
	actions *actionLog
	// bg, when set (WithBackgroundPulls), pulls beside the passes.
	bg *puller
	// peers are the references of the lists of kind peers, by path, as
	// their owner gave them for the pass that runs (Handoff.Peers); only
	// passes touch it.
	peers map[string]PeerRefs
}

// Option sets up a Runner.
type Option func(*Runner)

// WithRecorder has passes report what they do to rec (metrics).
func WithRecorder(rec Recorder) Option { return func(r *Runner) { r.rec = rec } }

// WithClock has passes decide settling and retries by now.
func WithClock(now func() time.Time) Option { return func(r *Runner) { r.now = now } }

// WithJournal has passes record their events and outcome in j.
func WithJournal(j *journal.Journal) Option { return func(r *Runner) { r.journal = j } }

// WithHandoff has passes hand what they decide to h.
func WithHandoff(h Handoff) Option { return func(r *Runner) { r.hand = h } }

// WithBackgroundPulls has the pull lists' references pulled beside the
// passes, which never wait for a pull: RunPulls runs the pulls, and
// onPulled is called when one completes, or has failed its first tries, so
// that a pass takes it.
func WithBackgroundPulls(onPulled func()) Option {
	return func(r *Runner) {
		r.bg = &puller{onPulled: onPulled, refs: map[string]*pullRef{}, wake: make(chan struct{}, 1)}
	}
}

// RunPulls runs the pulls passes ask for until ctx ends (WithBackgroundPulls);
// without it, it returns at once.
func (p *Runner) RunPulls(ctx context.Context) {
	if p.bg != nil {
		p.bg.run(ctx)
	}
}

// New makes a Runner over rt.
func New(rt hfruntime.Backend, cfg Config, opts ...Option) *Runner {
	r := &Runner{rt: rt, store: rt.ImportStore(), cfg: cfg, log: cfg.Log, rec: NoRecorder{}, now: time.Now, hand: noHandoff{},
		failed: map[string]failure{}, pullFailed: map[string]failure{}, seen: map[string]sighting{}}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.sigs.judge.Blobs = r.store
	for _, o := range opts {
		o(r)
	}
	if r.journal == nil {
		r.journal = journal.New(journal.DefaultSize, r.now)
	}
	if r.bg != nil {
		r.bg.pull, r.bg.now, r.bg.rec = r.pullOnce, r.now, r.rec
		r.bg.lease = r.rt.TempLease
		r.bg.release = func(ctx context.Context, lease string) { _ = r.rt.Release(ctx, lease) }
	}
	return r
}

// Run runs one pass: scan, import, plan, apply.
func (p *Runner) Run(ctx context.Context, opts Options) (Summary, Result) {
	start := time.Now()
	now := p.now() // for settling and retries: the daemon's clock
	var sum Summary
	var pr Result
	mark := p.hand.Begin()
	p.peers = p.hand.Peers() // before the scan: their owner writes a file back if it was edited
	p.loadPolicy(&sum)
	v, scan, spool := p.listAndScan(ctx)
	// The leases as listed, before this pass's imports.
	states, _, serr := v.now()
	for _, s := range scan.Skipped {
		p.log.Debug("skipped", "path", s.Path, "reason", s.Reason)
	}
	sum.Failures = append(sum.Failures, scan.Errors...)
	if serr == nil {
		sum.Failures = append(sum.Failures, lostKept(states)...)
	}
	p.checkMarkers(scan, states, serr, &sum)

	all := append(append([]source.Source{}, scan.Sources...), spool.Sources...)
	if opts.Settle {
		p.forgetUnseen(all)
	}
	sorted := p.sortSources(&scan, states, opts, now, &sum, &pr)

	imported := p.importAll(ctx, sorted.todo, knownStates(states, serr), states, v, &sum)
	spooled := p.importSpool(ctx, spool, opts, now, states, v, &sum, &pr)
	for _, s := range spooled {
		if s.fresh {
			imported[s.lease] = true
		}
	}
	lists, unread := p.pullLists(ctx, sorted.pullLists, v, &sum, imported)
	if p.bg != nil && len(unread) == 0 && len(sorted.waitingLists) == 0 {
		// Every list was read: a reference none of them names is no
		// longer pulled.
		p.bg.sweep(ctx)
	}
	pins, unreadPins := p.pinLists(ctx, sorted.pinLists, scan, v, &sum, imported)
	for path, pres := range pins {
		lists[path] = pres
	}
	// A list that could not be read or leased keeps what it had, as an
	// unreadable archive does.
	scan.Unreadable = append(append(scan.Unreadable, unread...), unreadPins...)
	scan.Sources = slices.DeleteFunc(scan.Sources, func(s source.Source) bool { return slices.Contains(sorted.gone, s.Path) })

	// The view, unless an image event since the listing may have made it
	// stale: then planWith lists the store again.
	var current *view
	if !p.hand.Changed(mark) {
		current = v
	}
	plan, judgment, err := planWith(ctx, p.rt, scan, imported, lists, current, func(path string) bool { return under(sorted.writing, path) }, namedBy(sorted.waitingLists), &p.sigs.judge)
	if err != nil {
		sum.Failures = append(sum.Failures, err)
	} else {
		p.reportSignatures(plan, verdictsOf(plan, judgment), &sum)
		p.recordPlan(plan)
		p.apply(ctx, plan, &sum)
		p.removeSpooled(ctx, spooled, &sum)
	}
	p.finish(all, start, err == nil, &sum, &pr)
	return sum, pr
}

// listAndScan reads what the pass reads first, at once: stale ingests go
// (before any import starts its own), the store is listed, the images dirs
// and the spool dirs scanned.
func (p *Runner) listAndScan(ctx context.Context) (*view, source.Result, source.Result) {
	var (
		v     *view
		reads sync.WaitGroup
	)
	reads.Go(func() {
		if err := p.rt.Cleanup(ctx); err != nil {
			p.log.Warn("cleaning up the store: stale ingests, probe leases, the hold of pinned records", "error", err)
		}
	})
	reads.Go(func() { v = list(ctx, p.rt) })
	scan := source.ScanWith(p.cfg.ImageDirs, source.ScanOptions{InsecurePerms: p.cfg.InsecurePerms})
	spool := p.scanSpool()
	reads.Wait()
	return v, scan, spool
}

// sortedSources is the images dirs' sources sorted by what the pass does
// with them.
type sortedSources struct {
	todo, pinLists, pullLists []source.Source
	writing                   []string        // images dirs holding a source still being written
	waitingLists              []source.Source // lists left for later: what they want now is not unpinned
	gone                      []string        // split archives missing a part: no longer sources
}

// sortSources sorts the scan's sources into archives to import, pull lists
// and pin lists. Sources still being written, or failed and not yet due, are
// left for later: their leases stay as they are (their paths go into
// scan.Unreadable). While one is being written, the sources gone from its
// images dir keep their pins and leases too, as it may want the same images
// (pin eagerly, unpin lazily); one waiting to retry a failed import holds
// nothing back, as it may never import.
func (p *Runner) sortSources(scan *source.Result, states []hfruntime.SourceState, opts Options, now time.Time, sum *Summary, pr *Result) sortedSources {
	var out sortedSources
	for _, src := range scan.Sources {
		// A list whose owner gave its references: its file, a record, need
		// not settle.
		if wait, settling := p.waitsFor(src, opts, now, sum, pr); wait {
			if settling {
				out.writing = append(out.writing, dirOf(scan.Dirs, src.Path))
			}
			if src.Kind == source.PinList || src.Kind == source.PullList {
				out.waitingLists = append(out.waitingLists, src)
			}
			scan.Unreadable = append(scan.Unreadable, src.Path)
			continue
		}
		if src.Incomplete != "" {
			// A split archive missing a part, settled: it is no longer a
			// source. What it had is released as for a deleted archive;
			// the missing part is reported.
			p.incompleteSource(src, states, sum)
			out.gone = append(out.gone, src.Path)
			continue
		}
		switch src.Kind {
		case source.PinList:
			out.pinLists = append(out.pinLists, src)
		case source.PullList:
			out.pullLists = append(out.pullLists, src)
		default:
			out.todo = append(out.todo, src)
		}
	}
	return out
}

// waitsFor is waits, but for a list of kind peers whose owner gave its
// references: it never waits.
func (p *Runner) waitsFor(src source.Source, opts Options, now time.Time, sum *Summary, pr *Result) (wait, settling bool) {
	if p.ownPeerList(src) {
		return false, false
	}
	return p.waits(src, opts, now, sum, pr)
}

// knownStates is the complete leases as listed, read once, by source and
// identity: an unchanged source is then checked without reading its lease
// again.
func knownStates(states []hfruntime.SourceState, serr error) map[string]*hfruntime.SourceState {
	known := map[string]*hfruntime.SourceState{}
	if serr == nil {
		for _, st := range states {
			if st.Complete && !st.Kept {
				known[st.Source+"\x00"+st.Identity] = &st
			}
		}
	}
	return known
}

// namedBy says which names the lists left to settle want as their files
// stand: a list just written (`holdfast pin`, say) has no lease yet, and may
// want what the plan would unpin. Nil when no list waits.
func namedBy(waitingLists []source.Source) func(string) bool {
	if len(waitingLists) == 0 {
		return nil
	}
	standing := standingOf(waitingLists, nil)
	return func(name string) bool { return standing.Err != nil || standing.Wants(name) }
}

// finish sets when the next check is due and records the pass: its summary,
// the journal and the metrics.
func (p *Runner) finish(all []source.Source, start time.Time, planned bool, sum *Summary, pr *Result) {
	if next := p.nextRetry(all); !next.IsZero() && (pr.NextCheck.IsZero() || next.Before(pr.NextCheck)) {
		pr.NextCheck = next
	}
	sum.Failed = len(sum.Failures)
	sum.Duration = time.Since(start)
	p.journal.Passed(sum.Images, len(all), p.failing(sum.Failures))
	p.rec.ReconcileDone(sum.Duration, planned)
	p.rec.SetSources(sum.sourceCounts())
}

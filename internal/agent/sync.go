// Package agent runs holdfast's passes: scan the images directories, import
// what changed, then reconcile records and leases with what the sources want.
package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/holdfast-project/holdfast/internal/importer"
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
	Settle    time.Duration // run: a file is complete when unmodified this long
	Resync    time.Duration // run: full pass at least this often
	// RegistryConfig is a hosts.toml directory (containerd's certs.d layout) for pulls.
	RegistryConfig string
	PullTimeout    time.Duration // for one pull of a pull list entry
	// Credentials per registry host for pulls (from K3s's registries.yaml).
	Credentials map[string]registries.Credential
	// InsecurePerms reads images dirs, spool dirs and lists that users other
	// than root and holdfast's own may change (source.CheckPerms).
	InsecurePerms bool
	Log           *slog.Logger
	// Progress, when set, follows the bytes imports read from archive files.
	Progress Progress
	// FeaturesOff say, each, which feature runs off because a path it needs
	// is missing: run records each as a Warning event (FeatureOff).
	FeaturesOff []string
}

// Progress wraps r, the archive file at path (size bytes) as an import opens
// it, so that a display can follow how much of it is read. The import closes
// the returned reader when it is done with the file, read through or not.
type Progress func(path string, size int64, r io.ReadCloser) io.ReadCloser

// Summary is what one pass did.
type Summary struct {
	Imported  int // sources read and leased
	Unchanged int // sources whose lease was complete and intact: not read
	Healed    int // records restored from leased content
	Unpinned  int // records no source wants any more
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
	return fmt.Sprintf("%d imported, %d unchanged, %d healed, %d unpinned, %d failed; %d images pinned, %d released, %d drift, %d conflicts; %s read in %s",
		s.Imported, s.Unchanged, s.Healed, s.Unpinned, s.Failed, s.Wanted, s.Released, s.Drift, len(s.Conflicts),
		units.Bytes(s.BytesRead), s.Duration.Round(time.Millisecond))
}

// CheckServer logs the server's version and warns when its CRI will not report
// pins to the kubelet.
func CheckServer(ctx context.Context, rt hfruntime.Runtime, log *slog.Logger) (hfruntime.ServerInfo, error) {
	info, err := rt.Server(ctx)
	if err != nil {
		return info, err
	}
	log.Debug("containerd", "version", info.Version)
	if !hfruntime.CRIHonoursPins(info.Version) {
		log.Warn("this containerd's CRI does not report pinned images to the kubelet (needs containerd >= 1.7.10 or 1.6.25): the kubelet's image GC may delete images holdfast pinned; holdfast's leases still keep their content and its heal restores deleted images",
			"version", info.Version)
	}
	return info, nil
}

// Sync runs one pass. Every source in the images dirs is imported unless its
// lease is complete and intact; then records are pinned, healed and unpinned
// and leases released as reconcile.Diff plans. One source failing never stops
// the others, and never unpins what it wanted before.
func Sync(ctx context.Context, rt importer.Backend, cfg Config) Summary {
	sum, _ := New(rt, cfg, nil).pass(ctx, passOptions{})
	return sum
}

// passOptions tune a pass of the agent: a one-shot sync uses none.
type passOptions struct {
	settle bool // skip sources modified within cfg.Settle (still being written)
	memo   bool // skip sources that failed before with the same identity, until their retry time
}

// passResult is what the loop needs to know after a pass.
type passResult struct {
	pending   []string        // sources not final yet: still being written, or waiting for a retry
	settling  []string        // of those, the ones still being written
	nextCheck time.Time       // when a pending source, a failed import or a failed pull is due
	touched   map[string]bool // names of image events the pass may have planned without
}

// pass runs one pass: scan, import, plan, apply.
func (a *Agent) pass(ctx context.Context, opts passOptions) (Summary, passResult) {
	start := time.Now()
	now := a.clock.Now() // for settling and retries: the agent's clock
	var sum Summary
	var pr passResult
	seen := a.beginPass()
	// What the pass reads first, read at once: stale ingests go (before any
	// import starts its own), the store is listed, the images dirs scanned.
	var (
		v     *view
		reads sync.WaitGroup
	)
	reads.Go(func() {
		if err := a.rt.Cleanup(ctx); err != nil {
			a.log.Warn("aborting stale ingests", "error", err)
		}
	})
	reads.Go(func() { v = list(ctx, a.rt) })
	scan := source.ScanWith(a.cfg.ImageDirs, source.ScanOptions{InsecurePerms: a.cfg.InsecurePerms})
	spool := a.scanSpool()
	reads.Wait()
	// The leases as listed, before this pass's imports.
	states, _, serr := v.now()
	for _, s := range scan.Skipped {
		a.log.Debug("skipped", "path", s.Path, "reason", s.Reason)
	}
	sum.Failures = append(sum.Failures, scan.Errors...)
	if serr == nil {
		sum.Failures = append(sum.Failures, lostKept(states)...)
	}
	a.checkMarkers(scan, states, serr, &sum)

	// Sources still being written, or failed and not yet due, are left for
	// later: their leases stay as they are. While one is being written, the
	// sources gone from its images dir keep their pins and leases too, as it
	// may want the same images (pin eagerly, unpin lazily); one waiting to
	// retry a failed import holds nothing back, as it may never import.
	all := append(append([]source.Source{}, scan.Sources...), spool.Sources...)
	if opts.settle {
		a.forgetUnseen(all)
	}
	var todo, pinLists, pullLists []source.Source
	var writing []string             // images dirs holding a source still being written
	var waitingLists []source.Source // lists left for later: what they want now is not unpinned
	for _, src := range scan.Sources {
		if wait, settling := a.waits(src, opts, now, &sum, &pr); wait {
			if settling {
				writing = append(writing, dirOf(scan.Dirs, src.Path))
			}
			if src.Kind == source.PinList || src.Kind == source.PullList {
				waitingLists = append(waitingLists, src)
			}
			scan.Unreadable = append(scan.Unreadable, src.Path)
			continue
		}
		switch src.Kind {
		case source.PinList:
			pinLists = append(pinLists, src)
		case source.PullList:
			pullLists = append(pullLists, src)
		default:
			todo = append(todo, src)
		}
	}

	// The leases as they are, read once: an unchanged source is then checked
	// without reading its lease again.
	known := map[string]*hfruntime.SourceState{}
	if serr == nil {
		for _, st := range states {
			if st.Complete && !st.Kept {
				known[st.Source+"\x00"+st.Identity] = &st
			}
		}
	}
	imported := a.importAll(ctx, todo, known, states, v, &sum)
	spooled := a.importSpool(ctx, spool, opts, now, states, v, &sum, &pr)
	for _, s := range spooled {
		if s.fresh {
			imported[s.lease] = true
		}
	}
	lists, unread := a.pullLists(ctx, pullLists, v, &sum, imported)
	pins, unreadPins := a.pinLists(ctx, pinLists, scan, v, &sum, imported)
	for p, pr := range pins {
		lists[p] = pr
	}
	// A list that could not be read or leased keeps what it had, as an
	// unreadable archive does.
	scan.Unreadable = append(append(scan.Unreadable, unread...), unreadPins...)

	// The view, unless an image event since the listing may have made it
	// stale: then planWith lists the store again.
	var current *view
	if !a.eventsSince(seen) {
		current = v
	}
	// A list just written (`holdfast pin`, say) that the pass leaves to
	// settle has no lease yet: as its file stands, it may want what the plan
	// would unpin.
	var named func(string) bool
	if len(waitingLists) > 0 {
		standing := standingOf(waitingLists, nil)
		named = func(name string) bool { return standing.Err != nil || standing.Wants(name) }
	}
	plan, err := planWith(ctx, a.rt, scan, imported, lists, current, func(path string) bool { return under(writing, path) }, named)
	if err != nil {
		sum.Failures = append(sum.Failures, err)
	} else {
		a.recordPlan(plan)
		a.apply(ctx, plan, &sum)
		a.removeSpooled(ctx, spooled, &sum)
	}
	pr.touched = a.takeTouched()
	if next := a.nextRetry(all); !next.IsZero() && (pr.nextCheck.IsZero() || next.Before(pr.nextCheck)) {
		pr.nextCheck = next
	}
	sum.Failed = len(sum.Failures)
	sum.Duration = time.Since(start)
	a.journal.Passed(sum.Images, len(all), a.failing(sum.Failures))
	a.rec.ReconcileDone(sum.Duration, err == nil)
	a.rec.SetSources(sum.sourceCounts())
	return sum, pr
}

// waits says whether src waits for a later pass (see deferred), and if so
// counts it as pending, and whether that is because it is still being written.
func (a *Agent) waits(src source.Source, opts passOptions, now time.Time, sum *Summary, pr *passResult) (wait, settling bool) {
	due, wait, settling := a.deferred(src, opts, now)
	if !wait {
		return false, false
	}
	sum.set(src, metrics.StatePending)
	pr.pending = append(pr.pending, src.Path)
	if settling {
		pr.settling = append(pr.settling, src.Path)
	}
	if pr.nextCheck.IsZero() || due.Before(pr.nextCheck) {
		pr.nextCheck = due
	}
	return true, settling
}

// deferred says whether src waits this pass, until when, and whether that is
// because it is still being written. See settledAt for when a file is complete.
func (a *Agent) deferred(src source.Source, opts passOptions, now time.Time) (due time.Time, wait, settling bool) {
	if opts.settle && a.cfg.Settle > 0 {
		if settled := a.settledAt(src, now); settled.After(now) {
			return settled, true, true
		}
	}
	if opts.memo {
		if until, ok := a.failedUntil(src.Path, src.Identity); ok {
			return until, true, false
		}
	}
	return time.Time{}, false, false
}

// settledAt is when src counts as completely written: once its mtime is the
// settle time old (a file renamed into place keeps its old mtime and is
// complete at once), or once its identity (size, mtime, inode, ctime) has
// stayed the same for the settle time by the agent's own clock, counted from
// when a pass first saw it. The second rule is for an mtime ahead of the
// clock (cp -p, rsync -a or tar -x from a machine whose clock is ahead),
// which would otherwise not be old enough for as long as the clocks differ.
func (a *Agent) settledAt(src source.Source, now time.Time) time.Time {
	byMtime := time.Unix(0, src.MtimeNs).Add(a.cfg.Settle)
	if a.seen == nil {
		a.seen = map[string]sighting{}
	}
	s, ok := a.seen[src.Path]
	if !ok || s.identity != src.Identity {
		s = sighting{identity: src.Identity, at: now}
		a.seen[src.Path] = s
	}
	if byClock := s.at.Add(a.cfg.Settle); byClock.Before(byMtime) {
		return byClock
	}
	return byMtime
}

// sighting is when a pass first saw a source with its current identity.
type sighting struct {
	identity string
	at       time.Time
}

// forgetUnseen drops the sightings of sources the scan no longer finds.
// Passes run one at a time: only they touch a.seen.
func (a *Agent) forgetUnseen(srcs []source.Source) {
	found := make(map[string]bool, len(srcs))
	for _, s := range srcs {
		found[s.Path] = true
	}
	for p := range a.seen {
		if !found[p] {
			delete(a.seen, p)
		}
	}
}

// dirOf is the images dir that path is in (path itself when in none).
func dirOf(dirs []string, path string) string {
	for _, d := range dirs {
		if under([]string{d}, path) {
			return filepath.Clean(d)
		}
	}
	return path
}

// importAll imports the sources, a few at a time, and returns the leases
// imported (not unchanged) in this pass.
func (a *Agent) importAll(ctx context.Context, srcs []source.Source, known map[string]*hfruntime.SourceState, leases []hfruntime.SourceState, v *view, sum *Summary) map[string]bool {
	parallel := a.cfg.Parallel
	if parallel <= 0 {
		parallel = min(4, max(2, runtime.NumCPU()))
	}
	imported := map[string]bool{}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for _, src := range srcs {
		g.Go(func() error {
			began := time.Now()
			res, err := importSource(gctx, a.store, src, known[src.Path+"\x00"+src.Identity], a.cfg.Progress)
			v.put(res.State)
			mu.Lock()
			defer mu.Unlock()
			a.recordImport(src, leases, false, res, err)
			sum.BytesRead += res.BytesRead
			if err != nil {
				sum.Failures = append(sum.Failures, err)
				sum.set(src, metrics.StateFailed)
				a.rec.ImportDone("failed", res.BytesRead, time.Since(began))
				a.noteFailure(src.Path, src.Identity, causeOf(err))
				return nil
			}
			a.clearFailure(src.Path)
			sum.set(src, metrics.StateApplied)
			if res.Unchanged {
				sum.Unchanged++
				a.rec.ImportDone("unchanged", 0, time.Since(began))
				return nil
			}
			sum.Imported++
			imported[res.Lease] = true
			a.rec.ImportDone("imported", res.BytesRead, time.Since(began))
			a.log.Info("imported", "path", src.Path, "images", len(res.Images), "written", res.Written,
				"present", res.Present, "bytes", res.BytesRead, "lease", res.Lease)
			return nil
		})
	}
	_ = g.Wait()
	return imported
}

// apply carries a plan out: pins first, then unpins, then releases, so that a
// wanted image is never unpinned and content is never unleased while wanted.
// The names the plan wants become the agent's wanted set before any unpin, so
// that heal never fights the pass.
func (a *Agent) apply(ctx context.Context, plan reconcile.Plan, sum *Summary) {
	a.wantDuringPins(plan)
	sum.Wanted = plan.Wanted
	sum.Images = 0
	for name := range plan.WantedNames {
		if !strings.Contains(name, "@") {
			sum.Images++
		}
	}
	sum.Conflicts = plan.Conflicts
	for _, c := range plan.Conflicts {
		a.log.Warn("conflict", "name", c.Name, "winner", c.Winner.Source, "target", c.Winner.Target, "losers", len(c.Losers))
	}
	pinFailed := false
	for _, p := range plan.Pins {
		if _, err := a.rt.Pin(ctx, p.Want, hfruntime.FirstPin(p.Reason == reconcile.ReasonNew)); err != nil {
			sum.Failures = append(sum.Failures, fmt.Errorf("pin %s (wanted by %s): %w", p.Want.Name, p.Source, err))
			pinFailed = true
			continue
		}
		switch p.Reason {
		case reconcile.ReasonNew:
		case reconcile.ReasonDrift:
			sum.Drift++
			sum.Healed++
			a.rec.Drift()
			a.rec.Healed(string(p.Reason))
			a.log.Warn("restored a re-pointed record", "name", p.Want.Name, "target", p.Want.Target.Digest, "source", p.Source)
		default:
			sum.Healed++
			a.rec.Healed(string(p.Reason))
			a.log.Info("healed", "name", p.Want.Name, "reason", p.Reason, "source", p.Source)
		}
	}
	a.setWanted(plan.WantedNames)
	a.setKept(plan.KeptNames)
	for _, u := range plan.Unpins {
		if err := a.rt.Unpin(ctx, u.Name); err != nil {
			sum.Failures = append(sum.Failures, fmt.Errorf("unpin %s: %w", u.Name, err))
			continue
		}
		sum.Unpinned++
		a.log.Info("unpinned", "name", u.Name, "reason", u.Reason)
		a.journal.Record(journal.Normal, journal.ReasonUnpinned, fmt.Sprintf("unpinned %s: %s", u.Name, u.Reason))
	}
	a.rec.Unpinned(sum.Unpinned)
	a.rec.SetPinned(plan.Wanted)
	for _, h := range plan.Held {
		a.log.Debug("kept while a source is still being written", "lease", h.Lease, "source", h.Source)
	}
	if pinFailed {
		// A lease may hold content a failed pin still needs: keep them all until the next pass.
		return
	}
	for _, r := range plan.Releases {
		if err := a.rt.Release(ctx, r.Lease); err != nil {
			sum.Failures = append(sum.Failures, fmt.Errorf("release %s: %w", r.Lease, err))
			continue
		}
		sum.Released++
		a.log.Info("released", "lease", r.Lease, "source", r.Source, "reason", r.Reason)
		a.journal.Record(journal.Normal, journal.ReasonReleased, fmt.Sprintf("released lease %s of %s: %s", r.Lease, r.Source, r.Reason))
	}
	a.rec.Released(sum.Released)
}

func importSource(ctx context.Context, store importer.Store, src source.Source, prior *hfruntime.SourceState, progress Progress) (hfruntime.ImportResult, error) {
	req := importRequest(src, false, progress)
	req.Prior = prior
	res, err := importer.Import(ctx, store, req)
	if err != nil {
		return res, sourceFailed(src.Path, err, fmt.Errorf("import %s: %w", src.Path, err))
	}
	return res, nil
}

// importRequest asks to import the archive or OCI layout dir src; kept marks
// a source kept until released, whatever becomes of its file. progress, if
// set, wraps the archive file as it is opened.
func importRequest(src source.Source, kept bool, progress Progress) hfruntime.ImportRequest {
	return hfruntime.ImportRequest{
		Source:   src.Path,
		Identity: src.Identity,
		MtimeNs:  src.MtimeNs,
		Dir:      src.Kind == source.OCIDir,
		Kept:     kept,
		Open: func() (io.ReadCloser, error) {
			f, err := source.Open(src.Path)
			if err != nil {
				return nil, err
			}
			if progress == nil {
				return f, nil
			}
			return progress(src.Path, src.Size, f), nil
		},
	}
}

// planWith returns what reconciling the store, as v sees it (listed again
// when v is nil or its listing failed), with scan would do. Sources that are
// not archives (lists) are present as given in lists; hold says which gone
// sources keep their leases this pass, named which names are not unpinned
// (reconcile.Input).
func planWith(ctx context.Context, rt hfruntime.Runtime, scan source.Result, imported map[string]bool, lists map[string]reconcile.Present,
	v *view, hold, named func(string) bool) (reconcile.Plan, error) {
	var err error
	if v == nil || v.err != nil {
		v = list(ctx, rt)
	}
	leases, records, err := v.now()
	if err != nil {
		return reconcile.Plan{}, err
	}
	present := map[string]reconcile.Present{}
	for _, s := range scan.Sources {
		if s.Kind == source.Archive || s.Kind == source.OCIDir {
			present[s.Path] = reconcile.Present{Path: s.Path, Identity: s.Identity}
		}
	}
	for p, pr := range lists {
		present[p] = pr
	}
	return reconcile.Diff(reconcile.Input{
		Leases:   leases,
		Present:  present,
		Unknown:  unknown(scan, leases),
		Hold:     hold,
		Named:    named,
		Imported: imported,
		Records:  records,
		// An unfinished kept import may be in flight in another process.
		KeptStaleBefore: time.Now().Add(-KeptStaleAge),
	}), nil
}

// unknown reports the sources a pass cannot judge: those at or below a path
// the scan could not read or must wait for, those in an images dir that lacks
// its marker and holds no source (an unmounted volume, see checkMarkers), and
// those outside the scanned images dirs (another configuration's, or a dir
// dropped from this one: they keep their pins and leases rather than lose
// them to a mistyped --images). Sources are named under the images dirs as
// given, also when a dir is a symlink, so paths compare as they are.
func unknown(scan source.Result, leases []hfruntime.SourceState) func(string) bool {
	unmarked := unconfirmed(scan, leases)
	return func(path string) bool {
		return under(scan.Unreadable, path) || under(unmarked, path) || !under(scan.Dirs, path)
	}
}

func under(dirs []string, path string) bool {
	for _, d := range dirs {
		d = filepath.Clean(d)
		if path == d || strings.HasPrefix(path, d+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

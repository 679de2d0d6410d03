// Package agent runs holdfast's passes: scan the images directories, import
// what changed, then reconcile records and leases with what the sources want.
package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/holdfast-project/holdfast/internal/reconcile"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/source"
)

// Config is what a pass needs to know.
type Config struct {
	ImageDirs []string
	Parallel  int // archives imported at once; 0 = a default from the CPU count
	Log       *slog.Logger
}

// Summary is what one pass did.
type Summary struct {
	Imported  int // sources read and leased
	Unchanged int // sources whose lease was complete and intact: not read
	Healed    int // records restored from leased content
	Pinned    int // records pinned for newly imported sources
	Unpinned  int // records no source wants any more
	Released  int // leases of sources that are gone or replaced
	Drift     int // records someone re-pointed, restored
	Conflicts []reconcile.Conflict
	Failed    int
	BytesRead int64
	Wanted    int     // names the sources want
	Failures  []error // each names the file and the cause
	Duration  time.Duration
}

// String is the one-line summary sync prints.
func (s Summary) String() string {
	return fmt.Sprintf("%d imported, %d unchanged, %d healed, %d unpinned, %d failed; %d images pinned, %d released, %d drift, %d conflicts; %s read in %s",
		s.Imported, s.Unchanged, s.Healed, s.Unpinned, s.Failed, s.Wanted, s.Released, s.Drift, len(s.Conflicts),
		Bytes(s.BytesRead), s.Duration.Round(time.Millisecond))
}

// CheckServer logs the server's version and warns when its CRI will not report
// pins to the kubelet.
func CheckServer(ctx context.Context, rt hfruntime.Runtime, log *slog.Logger) (hfruntime.ServerInfo, error) {
	info, err := rt.Server(ctx)
	if err != nil {
		return info, err
	}
	log.Debug("containerd", "version", info.Version, "uuid", info.UUID)
	if !hfruntime.CRIHonoursPins(info.Version) {
		log.Warn("this containerd's CRI does not report pinned images to the kubelet (needs containerd >= 1.7.10 or 1.6.25): the kubelet's image GC may delete images holdfast pinned; holdfast's leases still keep their content",
			"version", info.Version)
	}
	return info, nil
}

// Sync runs one pass. Every source in the images dirs is imported unless its
// lease is complete and intact; then records are pinned, healed and unpinned
// and leases released as reconcile.Diff plans. One source failing never stops
// the others, and never unpins what it wanted before.
func Sync(ctx context.Context, rt hfruntime.Runtime, cfg Config) Summary {
	start := time.Now()
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var sum Summary
	if err := rt.Cleanup(ctx); err != nil {
		log.Warn("aborting stale ingests", "error", err)
	}
	scan := source.Scan(cfg.ImageDirs)
	for _, s := range scan.Skipped {
		log.Debug("skipped", "path", s.Path, "reason", s.Reason)
	}
	sum.Failures = append(sum.Failures, scan.Errors...)

	imported := importAll(ctx, rt, cfg, log, scan.Sources, &sum)

	plan, err := Plan(ctx, rt, scan, imported)
	if err != nil {
		sum.Failures = append(sum.Failures, err)
	} else {
		apply(ctx, rt, plan, log, &sum)
	}
	sum.Failed = len(sum.Failures)
	sum.Duration = time.Since(start)
	return sum
}

// Plan reads the store and returns what reconciling it with scan would do.
func Plan(ctx context.Context, rt hfruntime.Runtime, scan source.Result, imported map[string]bool) (reconcile.Plan, error) {
	leases, err := rt.Sources(ctx)
	if err != nil {
		return reconcile.Plan{}, err
	}
	records, err := rt.Records(ctx)
	if err != nil {
		return reconcile.Plan{}, err
	}
	present := map[string]reconcile.Present{}
	for _, s := range scan.Sources {
		if s.Kind == source.Archive || s.Kind == source.OCIDir {
			present[s.Path] = reconcile.Present{Path: s.Path, Identity: s.Identity}
		}
	}
	return reconcile.Diff(reconcile.Input{
		Leases:   leases,
		Present:  present,
		Unknown:  unknownUnder(scan.Unreadable),
		Imported: imported,
		Records:  records,
	}), nil
}

// unknownUnder reports paths at or below a directory the scan could not read.
func unknownUnder(dirs []string) func(string) bool {
	return func(path string) bool {
		for _, d := range dirs {
			if path == d || strings.HasPrefix(path, d+string(filepath.Separator)) {
				return true
			}
		}
		return false
	}
}

// importAll imports the archive sources, a few at a time, and returns the
// leases imported (not unchanged) in this pass.
func importAll(ctx context.Context, rt hfruntime.Runtime, cfg Config, log *slog.Logger, srcs []source.Source, sum *Summary) map[string]bool {
	parallel := cfg.Parallel
	if parallel <= 0 {
		parallel = min(4, max(2, runtime.NumCPU()))
	}
	imported := map[string]bool{}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for _, src := range srcs {
		switch src.Kind {
		case source.Archive, source.OCIDir:
		default:
			log.Warn("list files are not read by this version", "path", src.Path, "kind", src.Kind)
			continue
		}
		g.Go(func() error {
			res, err := importSource(gctx, rt, src)
			mu.Lock()
			defer mu.Unlock()
			sum.BytesRead += res.BytesRead
			if err != nil {
				sum.Failures = append(sum.Failures, err)
				return nil
			}
			if res.Unchanged {
				sum.Unchanged++
				return nil
			}
			sum.Imported++
			imported[res.Lease] = true
			log.Info("imported", "path", src.Path, "images", len(res.Images), "written", res.Written,
				"present", res.Present, "bytes", res.BytesRead, "lease", res.Lease)
			return nil
		})
	}
	_ = g.Wait()
	return imported
}

// apply carries a plan out: pins first, then unpins, then releases, so that a
// wanted image is never unpinned and content is never unleased while wanted.
func apply(ctx context.Context, rt hfruntime.Runtime, plan reconcile.Plan, log *slog.Logger, sum *Summary) {
	sum.Wanted = plan.Wanted
	sum.Conflicts = plan.Conflicts
	for _, c := range plan.Conflicts {
		log.Warn("conflict", "name", c.Name, "winner", c.Winner.Source, "target", c.Winner.Target, "losers", len(c.Losers))
	}
	pinFailed := false
	for _, p := range plan.Pins {
		if err := rt.Pin(ctx, p.Want); err != nil {
			sum.Failures = append(sum.Failures, fmt.Errorf("pin %s (wanted by %s): %w", p.Want.Name, p.Source, err))
			pinFailed = true
			continue
		}
		switch p.Reason {
		case reconcile.ReasonNew:
			sum.Pinned++
		case reconcile.ReasonDrift:
			sum.Drift++
			sum.Healed++
			log.Warn("restored a re-pointed record", "name", p.Want.Name, "target", p.Want.Target.Digest, "source", p.Source)
		default:
			sum.Healed++
			log.Info("healed", "name", p.Want.Name, "reason", p.Reason, "source", p.Source)
		}
	}
	for _, u := range plan.Unpins {
		if err := rt.Unpin(ctx, u.Name); err != nil {
			sum.Failures = append(sum.Failures, fmt.Errorf("unpin %s: %w", u.Name, err))
			continue
		}
		sum.Unpinned++
		log.Info("unpinned", "name", u.Name, "reason", u.Reason)
	}
	if pinFailed {
		// A lease may hold content a failed pin still needs: keep them all until the next pass.
		return
	}
	for _, r := range plan.Releases {
		if err := rt.Release(ctx, r.Lease); err != nil {
			sum.Failures = append(sum.Failures, fmt.Errorf("release %s: %w", r.Lease, err))
			continue
		}
		sum.Released++
		log.Info("released", "lease", r.Lease, "source", r.Source, "reason", r.Reason)
	}
}

func importSource(ctx context.Context, rt hfruntime.Runtime, src source.Source) (hfruntime.ImportResult, error) {
	req := hfruntime.ImportRequest{
		Source:   src.Path,
		Identity: src.Identity,
		MtimeNs:  src.MtimeNs,
		Dir:      src.Kind == source.OCIDir,
		Open:     func() (io.ReadCloser, error) { return os.Open(src.Path) },
	}
	res, err := rt.Import(ctx, req)
	if err != nil {
		return res, fmt.Errorf("import %s: %w", src.Path, err)
	}
	return res, nil
}

// Bytes formats a byte count for people.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

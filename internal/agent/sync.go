// Package agent runs holdfast's passes: scan the images directories, import and
// pin what they hold, and report.
package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

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
	Imported  int
	Unchanged int
	Healed    int
	Unpinned  int
	Failed    int
	BytesRead int64
	Images    int     // names pinned by the pass
	Failures  []error // each names the file and the cause
	Duration  time.Duration
}

// String is the one-line summary sync prints.
func (s Summary) String() string {
	return fmt.Sprintf("%d imported, %d unchanged, %d healed, %d unpinned, %d failed; %d images pinned; %s read in %s",
		s.Imported, s.Unchanged, s.Healed, s.Unpinned, s.Failed, s.Images, Bytes(s.BytesRead), s.Duration.Round(time.Millisecond))
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

// Sync runs one pass: every source in the images dirs is imported and pinned.
// One source failing never stops the others.
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

	parallel := cfg.Parallel
	if parallel <= 0 {
		parallel = min(4, max(2, runtime.NumCPU()))
	}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for _, src := range scan.Sources {
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
			} else {
				sum.Imported++
			}
			sum.Images += len(res.Images)
			log.Info("source applied", "path", src.Path, "images", len(res.Images), "unchanged", res.Unchanged,
				"written", res.Written, "present", res.Present, "bytes", res.BytesRead, "lease", res.Lease)
			return nil
		})
	}
	_ = g.Wait()
	sum.Failed = len(sum.Failures)
	sum.Duration = time.Since(start)
	return sum
}

func importSource(ctx context.Context, rt hfruntime.Runtime, src source.Source) (hfruntime.ImportResult, error) {
	req := hfruntime.ImportRequest{
		Source:   src.Path,
		Identity: src.Identity,
		Dir:      src.Kind == source.OCIDir,
		Open: func() (io.ReadCloser, error) {
			return os.Open(src.Path)
		},
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

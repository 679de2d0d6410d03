package pass

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/holdfast-project/holdfast/internal/importer"
	"github.com/holdfast-project/holdfast/internal/metrics"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/source"
)

// importAll imports the sources, a few at a time, and returns the leases
// imported (not unchanged) in this pass.
func (p *Runner) importAll(ctx context.Context, srcs []source.Source, known map[string]*hfruntime.SourceState, leases []hfruntime.SourceState, v *view, sum *Summary) map[string]bool {
	parallel := p.cfg.Parallel
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
			res, err := importSource(gctx, p.store, src, known[src.Path+"\x00"+src.Identity], p.cfg.Progress, p.cfg.Policy != "")
			v.put(res.State)
			mu.Lock()
			defer mu.Unlock()
			p.recordImport(src, leases, false, res, err)
			sum.BytesRead += res.BytesRead
			if err != nil {
				sum.Failures = append(sum.Failures, err)
				sum.set(src, metrics.StateFailed)
				p.rec.ImportDone("failed", res.BytesRead, time.Since(began))
				p.noteFailure(src.Path, src.Identity, causeOf(err))
				return nil
			}
			p.clearFailure(src.Path)
			sum.set(src, metrics.StateApplied)
			if res.Unchanged {
				sum.Unchanged++
				p.rec.ImportDone("unchanged", 0, time.Since(began))
				return nil
			}
			sum.Imported++
			imported[res.Lease] = true
			p.rec.ImportDone("imported", res.BytesRead, time.Since(began))
			p.log.Info("imported", "path", src.Path, "format", res.Format, "images", len(res.Images), "written", res.Written,
				"present", res.Present, "bytes", res.BytesRead, "lease", res.Lease, "skipped", len(res.Skipped))
			p.logSkipped(src, res)
			return nil
		})
	}
	_ = g.Wait()
	return imported
}

func importSource(ctx context.Context, store hfruntime.Store, src source.Source, prior *hfruntime.SourceState, progress Progress, signed bool) (hfruntime.ImportResult, error) {
	req := importRequest(src, false, signed, progress)
	req.Prior = prior
	res, err := importer.Import(ctx, store, req)
	if err != nil {
		return res, sourceFailed(src.Path, err, fmt.Errorf("import %s: %w", src.Path, err))
	}
	return res, nil
}

// incomplete is the failure of a split archive whose parts do not make the
// whole of it, nil for any other source. Such a source is not opened: it
// waits while it is being written (see settledAt), then fails with this.
func incomplete(src source.Source) error {
	if src.Incomplete == "" {
		return nil
	}
	return fmt.Errorf("split into %d parts, and %s", len(src.Parts), src.Incomplete)
}

// importRequest asks to import the archive or OCI layout dir src; kept marks
// a source kept until released, whatever becomes of its file; signed, a
// signature policy in force (ImportRequest.Signed). progress, if set, wraps
// the archive (a split one's parts joined) as it is opened, and is given its
// whole size.
func importRequest(src source.Source, kept, signed bool, progress Progress) hfruntime.ImportRequest {
	return hfruntime.ImportRequest{
		Source:   src.Path,
		Identity: src.Identity,
		MtimeNs:  src.MtimeNs,
		Dir:      src.Kind == source.OCIDir,
		Kept:     kept,
		Signed:   signed,
		Open: func() (io.ReadCloser, error) {
			f, err := source.OpenSource(src)
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

// logSkipped names, at debug level, the entries of a bundle its import left
// out: signatures, attestations, SBOMs, charts, files.
func (p *Runner) logSkipped(src source.Source, res hfruntime.ImportResult) {
	for _, e := range res.Skipped {
		p.log.Debug("not an image: skipped", "path", src.Path, "entry", e)
	}
}

// incompleteSource reports a split archive of an images dir that has settled
// with a part missing: deleting a part of a split archive is deleting the
// archive, so its pins and lease go as a deleted archive's would, and the
// failure names the missing part. It is not retried: its identity changes
// when the part comes back.
func (p *Runner) incompleteSource(src source.Source, leases []hfruntime.SourceState, sum *Summary) {
	err := incomplete(src)
	p.recordImport(src, leases, false, hfruntime.ImportResult{}, err)
	sum.Failures = append(sum.Failures, sourceFailed(src.Path, err, fmt.Errorf("import %s: %w (its images are unpinned as for a deleted archive)", src.Path, err)))
	sum.set(src, metrics.StateFailed)
	p.clearFailure(src.Path)
}

package pass

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/holdfast-project/holdfast/internal/importer"
	"github.com/holdfast-project/holdfast/internal/metrics"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/source"
)

// spooled is one spool file a pass imported as a kept source: once its lease
// is complete and intact and its images are pinned, the file goes.
type spooled struct {
	src   source.Source
	lease string
	fresh bool // imported in this pass, not found complete already
}

// scanSpool scans the spool dirs. Lists have no place there: they are
// reported and left alone.
func (p *Runner) scanSpool() source.Result {
	if len(p.cfg.SpoolDirs) == 0 {
		return source.Result{}
	}
	scan := source.ScanWith(p.cfg.SpoolDirs, source.ScanOptions{InsecurePerms: p.cfg.InsecurePerms, What: "spool dir"})
	kept := scan.Sources[:0]
	for _, src := range scan.Sources {
		if src.Kind == source.PinList || src.Kind == source.PullList {
			scan.Errors = append(scan.Errors, fmt.Errorf("%s: a %s in a spool dir is not read (spool dirs take archives and OCI layouts; put lists in an images dir)", src.Path, src.Kind))
			continue
		}
		kept = append(kept, src)
	}
	scan.Sources = kept
	return scan
}

// importSpool imports the spool files that are completely written, each as a
// kept source. One still being written, or waiting to retry a failed import,
// is left for a later pass; a failed one stays in place and is reported.
func (p *Runner) importSpool(ctx context.Context, scan source.Result, opts Options, now time.Time, leases []hfruntime.SourceState, v *view, sum *Summary, pr *Result) []spooled {
	sum.Failures = append(sum.Failures, scan.Errors...)
	var out []spooled
	for _, src := range scan.Sources {
		if wait, _ := p.waits(src, opts, now, sum, pr); wait {
			continue
		}
		began := time.Now()
		var res hfruntime.ImportResult
		err := incomplete(src)
		if err == nil {
			res, err = importer.Import(ctx, p.store, importRequest(src, true, p.cfg.Policy != "", p.cfg.Progress))
		}
		v.put(res.State)
		p.recordImport(src, leases, true, res, err)
		sum.BytesRead += res.BytesRead
		if err != nil {
			sum.Failures = append(sum.Failures, sourceFailed(src.Path, err, fmt.Errorf("import %s (left in the spool dir): %w", src.Path, err)))
			sum.set(src, metrics.StateFailed)
			p.rec.ImportDone("failed", res.BytesRead, time.Since(began))
			p.noteFailure(src.Path, src.Identity, err)
			continue
		}
		p.clearFailure(src.Path)
		sum.set(src, metrics.StateApplied)
		if res.Unchanged {
			sum.Unchanged++
			p.rec.ImportDone("unchanged", 0, time.Since(began))
		} else {
			sum.Imported++
			p.rec.ImportDone("imported", res.BytesRead, time.Since(began))
			p.log.Info("imported from spool", "path", src.Path, "format", res.Format, "images", len(res.Images), "written", res.Written,
				"present", res.Present, "bytes", res.BytesRead, "lease", res.Lease, "skipped", len(res.Skipped))
			p.logSkipped(src, res)
		}
		out = append(out, spooled{src: src, lease: res.Lease, fresh: !res.Unchanged})
	}
	return out
}

// removeSpooled deletes the spool files whose kept source is complete, intact
// and pinned, and whose file is still the one imported. Any doubt leaves the
// file for a later pass, and is reported.
func (p *Runner) removeSpooled(ctx context.Context, done []spooled, sum *Summary) {
	if len(done) == 0 {
		return
	}
	if p.actions != nil {
		// A dry run pinned nothing: each file its pass imports would go.
		for _, s := range done {
			p.actions.add(Action{Action: "remove", Source: s.src.Path, Lease: s.lease, Reason: "imported, kept and pinned"})
		}
		return
	}
	states, records, err := readStore(ctx, p.rt)
	if err != nil {
		sum.Failures = append(sum.Failures, fmt.Errorf("checking spool imports: %w", err))
		return
	}
	byLease := map[string]hfruntime.SourceState{}
	for _, st := range states {
		byLease[st.Lease] = st
	}
	owned := map[string]bool{}
	for _, r := range records {
		owned[r.Name] = r.Owned()
	}
	for _, s := range done {
		if err := verifySpooled(s, byLease[s.lease], owned); err != nil {
			sum.Failures = append(sum.Failures, fmt.Errorf("%s: not removed from the spool dir: %w", s.src.Path, err))
			continue
		}
		if err := removeSource(s.src); err != nil {
			sum.Failures = append(sum.Failures, err)
			continue
		}
		sum.Spooled = append(sum.Spooled, s.src.Path)
		p.log.Info("removed from spool: imported, kept, pinned", "path", s.src.Path, "lease", s.lease)
	}
}

// removeSource deletes a spool source: its file or directory, or every part
// of a split archive.
func removeSource(src source.Source) error {
	if len(src.Parts) == 0 {
		if err := os.RemoveAll(src.Path); err != nil {
			return fmt.Errorf("removing %s: %w", src.Path, err)
		}
		return nil
	}
	var errs []error
	for _, part := range src.Parts {
		if err := os.Remove(part); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing %s (a part of %s): %w", part, src.Path, err))
		}
	}
	return errors.Join(errs...)
}

// verifySpooled says why a spool source may not go yet, if it may not. Its
// file (every part of a split archive) is identified again.
func verifySpooled(s spooled, st hfruntime.SourceState, owned map[string]bool) error {
	switch {
	case st.Lease == "" || !st.Complete:
		return fmt.Errorf("lease %s is not complete", s.lease)
	case !st.Intact:
		return fmt.Errorf("lease %s lacks content", s.lease)
	}
	for _, w := range st.Images {
		if !owned[w.Name] {
			return fmt.Errorf("%s is not pinned", w.Name)
		}
	}
	now, err := source.Identify(s.src.Path)
	if err != nil {
		return err
	}
	if now.Identity != s.src.Identity {
		return fmt.Errorf("it changed since it was imported")
	}
	return nil
}

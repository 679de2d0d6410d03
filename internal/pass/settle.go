package pass

import (
	"path/filepath"
	"time"

	"github.com/holdfast-project/holdfast/internal/metrics"
	"github.com/holdfast-project/holdfast/internal/source"
)

// waits says whether src waits for a later pass (see deferred), and if so
// counts it as pending, and whether that is because it is still being written.
func (p *Runner) waits(src source.Source, opts Options, now time.Time, sum *Summary, pr *Result) (wait, settling bool) {
	due, wait, settling := p.deferred(src, opts, now)
	if !wait {
		return false, false
	}
	sum.set(src, metrics.StatePending)
	pr.Pending = append(pr.Pending, src.Path)
	if settling {
		pr.Settling = append(pr.Settling, src.Path)
	}
	if pr.NextCheck.IsZero() || due.Before(pr.NextCheck) {
		pr.NextCheck = due
	}
	return true, settling
}

// deferred says whether src waits this pass, until when, and whether that is
// because it is still being written. See settledAt for when a file is complete.
func (p *Runner) deferred(src source.Source, opts Options, now time.Time) (due time.Time, wait, settling bool) {
	if opts.Settle && p.cfg.Settle > 0 {
		if settled := p.settledAt(src, now); settled.After(now) {
			return settled, true, true
		}
	}
	if opts.Memo {
		if until, ok := p.failedUntil(src.Path, src.Identity); ok {
			return until, true, false
		}
	}
	return time.Time{}, false, false
}

// settledAt is when src counts as completely written: once its mtime is the
// settle time old (a file renamed into place keeps its old mtime and is
// complete at once), or once its identity (size, mtime, inode, ctime) has
// stayed the same for the settle time by the Runner's clock, counted from
// when a pass first saw it. The second rule is for an mtime ahead of the
// clock (cp -p, rsync -a or tar -x from a machine whose clock is ahead),
// which would otherwise not be old enough for as long as the clocks differ.
//
// A split archive's MtimeNs is its newest part's and its Identity covers
// every part, so it settles once no part has changed, appeared or gone for
// the settle time. One whose parts do not make the whole of it
// (Incomplete) settles by the second rule only: parts copied with their
// mtimes (cp -p, rsync -a) are old while the rest are still on their way.
// Once settled, it fails (see incomplete).
func (p *Runner) settledAt(src source.Source, now time.Time) time.Time {
	byMtime := time.Unix(0, src.MtimeNs).Add(p.cfg.Settle)
	s, ok := p.seen[src.Path]
	if !ok || s.identity != src.Identity {
		s = sighting{identity: src.Identity, at: now}
		p.seen[src.Path] = s
	}
	byClock := s.at.Add(p.cfg.Settle)
	if byClock.Before(byMtime) || src.Incomplete != "" {
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
// Passes run one at a time: only they touch p.seen.
func (p *Runner) forgetUnseen(srcs []source.Source) {
	found := make(map[string]bool, len(srcs))
	for _, s := range srcs {
		found[s.Path] = true
	}
	for path := range p.seen {
		if !found[path] {
			delete(p.seen, path)
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

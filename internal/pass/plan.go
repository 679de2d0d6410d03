package pass

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"github.com/holdfast-project/holdfast/internal/reconcile"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/signature"
	"github.com/holdfast-project/holdfast/internal/source"
)

// planWith returns what reconciling the store, as v sees it (listed again
// when v is nil or its listing failed), with scan would do. Sources that are
// not archives (lists) are present as given in lists; hold says which gone
// sources keep their leases this pass, named which names are not unpinned
// (reconcile.Input). The judge's policy judges the images the leases want:
// the plan leaves out what it refuses, and the judgment is returned for the
// report (nil without a policy).
func planWith(ctx context.Context, rt hfruntime.Runtime, scan source.Result, imported map[string]bool, lists map[string]reconcile.Present,
	v *view, hold, named func(string) bool, judge *signature.Judge) (reconcile.Plan, *signature.Judgment, error) {
	if v == nil || v.err != nil {
		v = list(ctx, rt)
	}
	leases, records, err := v.now()
	if err != nil {
		return reconcile.Plan{}, nil, err
	}
	judgment := judge.For(ctx, leases)
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
		Refused:  judgment.Refuses,
		Leases:   leases,
		Present:  present,
		Unknown:  unknown(scan, leases),
		Hold:     hold,
		Named:    named,
		Imported: imported,
		Records:  records,
		// An unfinished kept import may be in flight in another process.
		KeptStaleBefore: time.Now().Add(-KeptStaleAge),
	}), judgment, nil
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

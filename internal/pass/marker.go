package pass

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/source"
)

// An images dir that holdfast has found sources in carries source.Marker. A
// dir that lacks it, holds no source, and from which holdfast still leases
// sources is not judged: an unmounted volume (or one not mounted yet) looks
// just like a dir emptied on purpose, and only the second may unpin anything.
// The operator confirms the second by creating the marker.

// checkMarkers reports the images dirs a pass keeps as they are for want of
// their marker (leases are the sources' leases, unless lerr says they could
// not be read), and writes the marker into every dir that holds a source and lacks
// it, so that existing dirs get one without a manual step.
func (p *Runner) checkMarkers(scan source.Result, leases []hfruntime.SourceState, lerr error, sum *Summary) {
	for dir, target := range scan.Links {
		p.log.Debug("images dir is a symlink", "path", dir, "target", target)
	}
	if lerr == nil {
		for _, dir := range unconfirmed(scan, leases) {
			sum.Failures = append(sum.Failures, unconfirmedError(dir, leases))
		}
	}
	for _, dir := range scan.Unmarked {
		if !holdsSource(scan, dir) || p.actions != nil { // a dry run writes nothing
			continue
		}
		if err := writeMarker(dir); err != nil {
			// Without it the dir is still judged while it holds sources; once
			// emptied it is kept until someone creates the marker.
			p.log.Debug("cannot mark an images dir", "path", dir, "error", err)
		}
	}
}

// unconfirmed returns the images dirs that lack the marker, hold no source,
// and from which holdfast leases sources: unknown this pass.
func unconfirmed(scan source.Result, leases []hfruntime.SourceState) []string {
	var out []string
	for _, dir := range scan.Unmarked {
		if holdsSource(scan, dir) {
			continue
		}
		for _, st := range leases {
			if under([]string{dir}, st.Source) {
				out = append(out, dir)
				break
			}
		}
	}
	return out
}

func unconfirmedError(dir string, leases []hfruntime.SourceState) error {
	n := 0
	for _, st := range leases {
		if under([]string{dir}, st.Source) {
			n++
		}
	}
	return fmt.Errorf("images dir %s holds no source and no %s file, yet holdfast leases %d source(s) from it: "+
		"taken for a volume that is not mounted, every pin and lease of it is kept; "+
		"if the dir was emptied on purpose, confirm with: touch %s",
		dir, source.Marker, n, filepath.Join(dir, source.Marker))
}

func holdsSource(scan source.Result, dir string) bool {
	for _, s := range scan.Sources {
		if under([]string{dir}, s.Path) {
			return true
		}
	}
	return false
}

const markerText = `holdfast writes this file into each images dir it finds sources in. An images
dir that holds no source and lacks this file is taken for a volume that is not
mounted: holdfast keeps the pins and leases of what it brought from there.
`

// writeMarker creates the marker in dir, unless it is there already.
func writeMarker(dir string) error {
	path := filepath.Join(dir, source.Marker)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := f.WriteString(markerText); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// checkSpoolDirs refuses a spool dir that is, holds or lies in an images dir
// (the default one and <data-dir>/pins count): a pass would import that
// images dir's archives as kept sources and then delete them. Dirs are
// compared as they resolve, symlinks followed, so a link to an images dir is
// caught too; each is named as it was given.
func (o *options) checkSpoolDirs() error {
	if len(o.spool) == 0 {
		return nil
	}
	images := append([]string{}, o.images...)
	if len(images) == 0 {
		images = append(images, o.layout().Images())
	}
	images = append(images, o.layout().OwnDirs()...)
	var errs []error
	for _, s := range o.spool {
		rs, err := resolved(s)
		if err != nil {
			return &usageError{fmt.Errorf("spool dir %s: %w", s, err)}
		}
		for _, d := range images {
			rd, err := resolved(d)
			if err != nil {
				return &usageError{fmt.Errorf("images dir %s: %w", d, err)}
			}
			how := ""
			switch {
			case rs == rd:
				how = "is"
			case within(rs, rd):
				how = "lies in"
			case within(rd, rs):
				how = "holds"
			default:
				continue
			}
			errs = append(errs, fmt.Errorf("spool dir %s %s images dir %s: holdfast deletes what it imports from a spool dir, so the two must not overlap", s, how, d))
		}
	}
	if len(errs) > 0 {
		return &usageError{errors.Join(errs...)}
	}
	return nil
}

// resolved is dir made absolute with every symlink in it followed, as far as
// it exists; the part that does not exist yet is kept as given.
func resolved(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	var rest []string
	for p := abs; ; p = filepath.Dir(p) {
		r, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(append([]string{r}, rest...)...), nil
		}
		if !errors.Is(err, fs.ErrNotExist) || p == filepath.Dir(p) {
			return "", err
		}
		rest = append([]string{filepath.Base(p)}, rest...)
	}
}

// within says whether path lies under dir (both clean and absolute).
func within(path, dir string) bool {
	return strings.HasPrefix(path, strings.TrimSuffix(dir, string(os.PathSeparator))+string(os.PathSeparator))
}

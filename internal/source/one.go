package source

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/holdfast-project/holdfast/internal/lineerr"
)

// Identify classifies and identifies one path an operator named (holdfast
// import): an archive file, an OCI layout directory, or a split archive,
// named by any of its parts or by its name without the part suffix (its
// parts are found in that directory). Lists and other files are errors that
// say what the path is.
func Identify(path string) (Source, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if parts := bundleParts(path); len(parts) > 0 {
			return bundleOf(path, parts)
		}
	}
	if err != nil {
		return Source{}, fmt.Errorf("reading %s: %w", path, lineerr.Cause(err))
	}
	if fi.IsDir() {
		if !isLayout(path) {
			return Source{}, fmt.Errorf("%s is a directory without an oci-layout file (nor index.json and blobs/): not an OCI layout", path)
		}
		return identify(path, OCIDir)
	}
	if !fi.Mode().IsRegular() {
		return Source{}, nonRegular(path, fi.Mode())
	}
	if base, p, ok := parsePart(filepath.Base(path)); ok && isPart(path, p) {
		bundle := filepath.Join(filepath.Dir(path), base)
		if _, err := os.Lstat(bundle); err == nil {
			return Source{}, fmt.Errorf("%s is a part of a split archive, and %s is there whole: import that", path, bundle)
		}
		return bundleOf(bundle, bundleParts(bundle))
	}
	kind, reason, err := classify(path)
	switch {
	case err != nil:
		return Source{}, err
	case kind == PullList || kind == PinList:
		return Source{}, fmt.Errorf("%s is a %s: lists are read from an images dir, only archives and OCI layouts are imported", path, kind)
	case kind == "":
		return Source{}, errors.New(path + ": " + reason)
	}
	return identify(path, kind)
}

package source

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Identify classifies and identifies one path an operator named (holdfast
// import): an archive file or an OCI layout directory. Lists and other files
// are errors that say what the path is.
func Identify(path string) (Source, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Source{}, fmt.Errorf("reading %s: %w", path, cause(err))
	}
	if fi.IsDir() {
		if _, err := os.Stat(filepath.Join(path, "oci-layout")); err != nil {
			return Source{}, fmt.Errorf("%s is a directory without an oci-layout file: not an OCI layout", path)
		}
		return identify(path, OCIDir)
	}
	if !fi.Mode().IsRegular() {
		return Source{}, fmt.Errorf("%s is not a regular file", path)
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

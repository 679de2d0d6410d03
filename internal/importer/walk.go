package importer

import (
	"context"
	"io"

	"github.com/holdfast-project/holdfast/internal/archive"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// Walk reads the source req names once into st, as an import reads it: the
// layout dir req.Source (req.Dir), or the archive stream req.Open opens
// (WalkStream). Holdfast verify walks a source into archive.Discard.
func Walk(ctx context.Context, req runtime.ImportRequest, st archive.Store) (*archive.Result, error) {
	if req.Dir {
		return archive.WalkDirWith(ctx, req.Source, st, walkOptions(req.Name))
	}
	rc, err := req.Open()
	if err != nil {
		return nil, err
	}
	walked, err := WalkStream(ctx, rc, req.Name, st)
	if cerr := rc.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return walked, err
}

// WalkStream reads the archive stream r once into st, as an import reads
// it, every blob checked against its digest; name names the image of a
// layout that names none (a cosign layout).
func WalkStream(ctx context.Context, r io.Reader, name string, st archive.Store) (*archive.Result, error) {
	return archive.WalkWith(ctx, r, st, walkOptions(name))
}

// walkOptions are those of every walk of a source: a bundle's entries that
// are no images are read too, and a layout dir's signatures as a tar's are,
// to be kept or judged.
func walkOptions(name string) archive.WalkOptions {
	return archive.WalkOptions{Name: name, ReadSkipped: true}
}

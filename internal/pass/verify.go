package pass

import (
	"context"
	"io"

	"github.com/holdfast-project/holdfast/internal/archive"
	"github.com/holdfast-project/holdfast/internal/importer"
	"github.com/holdfast-project/holdfast/internal/signature"
	"github.com/holdfast-project/holdfast/internal/signature/layout"
	"github.com/holdfast-project/holdfast/internal/source"
)

// Verified is what Verify judged: the source as it was identified (a split
// archive by its joined name; "-" for standard input) and its images.
type Verified struct {
	Path   string
	Images []signature.Image
}

// Verify judges the images of the archive, bundle or layout dir at path
// against pol, offline: the source is read whole as an import reads it
// (importer.Walk), keeping nothing but its documents, and nothing is
// imported. name names the image of a cosign layout.
func Verify(ctx context.Context, pol *signature.Policy, path, name string) (Verified, error) {
	src, err := source.Identify(path)
	if err != nil {
		return Verified{}, err
	}
	if err := incomplete(src); err != nil {
		return Verified{}, err
	}
	req := importRequest(src, false, false, nil)
	req.Name = name
	res, err := importer.Walk(ctx, req, archive.Discard)
	if err != nil {
		return Verified{}, err
	}
	return Verified{Path: src.Path, Images: signature.Check(ctx, pol, res, layout.Docs(res))}, nil
}

// VerifyStream is Verify for an archive read from r (standard input).
func VerifyStream(ctx context.Context, pol *signature.Policy, r io.Reader, name string) (Verified, error) {
	res, err := importer.WalkStream(ctx, r, name, archive.Discard)
	if err != nil {
		return Verified{}, err
	}
	return Verified{Path: "-", Images: signature.Check(ctx, pol, res, layout.Docs(res))}, nil
}

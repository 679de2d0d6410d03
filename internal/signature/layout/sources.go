package layout

import (
	"context"
	"errors"
	"sync"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/archive"
	"github.com/holdfast-project/holdfast/internal/oci"
)

// Finder finds images' signatures among candidates, reading every
// candidate once (NewIndex), on its first use: a finder no image is looked
// up in reads nothing.
type Finder struct {
	index func() *Index
}

// NewFinder is a Finder of the signatures among candidates, read with b.
func NewFinder(ctx context.Context, candidates []ocispec.Descriptor, b oci.Reader) *Finder {
	return &Finder{index: sync.OnceValue(func() *Index { return NewIndex(ctx, candidates, b) })}
}

// Find is Index.Find: the signatures that claim image, and the errors of
// the candidates that could not be read and may have claimed it.
func (f *Finder) Find(image ocispec.Descriptor) ([]Signature, []error) {
	return f.index().Find(image)
}

// Candidates are the manifests of res that may be signatures: the index
// entries the walk skipped (signatures, referrers, and the rest, which
// NewIndex passes over), named with the name each carried (so that a
// <repo>:sha256-<hex>.sig name claims its image), and the images named with
// a cosign tag.
func Candidates(res *archive.Result) []ocispec.Descriptor {
	var out []ocispec.Descriptor
	for _, s := range res.Skipped {
		d := ocispec.Descriptor{MediaType: s.MediaType, Digest: s.Digest, Size: s.Size}
		if s.Name != "" {
			d.Annotations = map[string]string{oci.AnnotationRefName: s.Name}
		}
		out = append(out, d)
	}
	for _, img := range res.Images {
		if _, tag := oci.ParseCosignTag(img.Name); tag {
			d := img.Target
			d.Annotations = map[string]string{oci.AnnotationRefName: img.Name}
			out = append(out, d)
		}
	}
	return out
}

// Carried returns, for each image res names (cosign's tags aside), the
// signatures res carries that claim it, read from what the walk kept
// (Docs). A candidate that cannot be read is passed over: an import keeps
// what can be judged later.
func Carried(ctx context.Context, res *archive.Result) map[digest.Digest][]Signature {
	candidates := Candidates(res)
	if len(candidates) == 0 {
		return nil
	}
	find := NewFinder(ctx, candidates, Docs(res))
	out := map[digest.Digest][]Signature{}
	for _, img := range res.Images {
		if _, tag := oci.ParseCosignTag(img.Name); tag {
			continue
		}
		if _, ok := out[img.Target.Digest]; ok {
			continue
		}
		if sigs, _ := find.Find(img.Target); len(sigs) > 0 {
			out[img.Target.Digest] = sigs
		}
	}
	return out
}

// Docs reads blobs from what a walk kept of them: its documents (manifests,
// configs, and small JSON blobs such as simple-signing payloads and sigstore
// bundles). Any other blob cannot be read: the error says why, and is
// oci.ErrNotFound for one the archive does not hold.
func Docs(res *archive.Result) oci.Reader { return docs{res} }

type docs struct{ res *archive.Result }

func (d docs) ReadBlob(_ context.Context, desc ocispec.Descriptor) ([]byte, error) {
	if b, ok := d.res.Docs[desc.Digest]; ok {
		return b, nil
	}
	if _, ok := d.res.Blobs[desc.Digest]; ok {
		return nil, errors.New("in the archive, but not a small JSON document, which is all a check keeps of it")
	}
	return nil, oci.NotFound(errors.New("not in the archive"))
}

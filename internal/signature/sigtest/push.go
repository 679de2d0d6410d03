package sigtest

import (
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
)

// Push uploads the manifest desc of b, and the blobs it names, to ref (a
// tag or a digest reference) as they are: a registry then holds the bytes
// b holds, as cosign pushes its signatures. go-containerregistry's client
// writes the fallback tag's index of a referrer when the registry has no
// referrers API.
func (b Blobs) Push(ref string, desc ocispec.Descriptor, opts ...remote.Option) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	children, err := oci.Children(desc, b[desc.Digest])
	if err != nil {
		return err
	}
	for _, c := range children {
		if err := remote.WriteLayer(r.Context(), static.NewLayer(b[c.Digest], types.MediaType(c.MediaType)), opts...); err != nil {
			return fmt.Errorf("pushing %s: %w", c.Digest, err)
		}
	}
	if err := remote.Put(r, rawManifest{b[desc.Digest], desc.MediaType}, opts...); err != nil {
		return fmt.Errorf("pushing %s: %w", ref, err)
	}
	return nil
}

// rawManifest is a manifest go-containerregistry pushes as it is.
type rawManifest struct {
	raw       []byte
	mediaType string
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.raw, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return types.MediaType(m.mediaType), nil }

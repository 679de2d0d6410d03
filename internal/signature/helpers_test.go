package signature

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"maps"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"

	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
)

// blobs is a content store in memory.
type blobs map[digest.Digest][]byte

func (b blobs) Read(_ context.Context, d ocispec.Descriptor) ([]byte, error) {
	if c, ok := b[d.Digest]; ok {
		return c, nil
	}
	return nil, errors.New("not found")
}

// put stores content and returns its descriptor.
func (b blobs) put(mediaType string, content []byte) ocispec.Descriptor {
	d := digest.FromBytes(content)
	b[d] = content
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(content))}
}

// putJSON stores v as JSON.
func (b blobs) putJSON(t *testing.T, mediaType string, v any) ocispec.Descriptor {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b.put(mediaType, raw)
}

// image stores a small image manifest and returns its descriptor.
func (b blobs) image(t *testing.T, tag string) ocispec.Descriptor {
	t.Helper()
	cfg := b.put(ocispec.MediaTypeImageConfig, []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]},"config":{"Labels":{"tag":"`+tag+`"}}}`))
	return b.putJSON(t, ocispec.MediaTypeImageManifest, ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    cfg,
		Layers:    []ocispec.Descriptor{},
	})
}

// manifest stores a manifest of these layers, with an empty config as
// cosign gives its signature manifests, and returns its descriptor.
func (b blobs) manifest(t *testing.T, layers ...ocispec.Descriptor) ocispec.Descriptor {
	t.Helper()
	return b.putJSON(t, ocispec.MediaTypeImageManifest, ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    b.put(ocispec.MediaTypeImageConfig, []byte("{}")),
		Layers:    layers,
	})
}

// repo is where the test images are said to come from.
const repo = "registry.example/team/app"

// cosignPayload is the simple-signing payload cosign signs for an image.
func cosignPayload(t *testing.T, image digest.Digest) []byte {
	t.Helper()
	return sigtest.Payload(t, repo, image)
}

// sigLayer stores a simple-signing layer of payload p with annotations.
func (b blobs) sigLayer(p []byte, ann map[string]string) ocispec.Descriptor {
	d := b.put(MediaTypeSimpleSigning, p)
	d.Annotations = ann
	return d
}

// legacy stores the .sig manifest cosign sign --key pushes for image,
// signed by k, and returns it as an archive's index entry, unnamed.
func (b blobs) legacy(t *testing.T, image digest.Digest, k *ecdsa.PrivateKey) ocispec.Descriptor {
	t.Helper()
	m := sigtest.Legacy(t, repo, image, k)
	maps.Copy(b, m.Blobs)
	return m.Descriptor
}

// tagged names a candidate as Zarf does the .sig records it carries.
func tagged(d ocispec.Descriptor, image digest.Digest) ocispec.Descriptor {
	d.Annotations = map[string]string{ocispec.AnnotationRefName: repo + ":" + SigTag(image)}
	return d
}

func find(t *testing.T, b blobs, image ocispec.Descriptor, candidates ...ocispec.Descriptor) []Signature {
	t.Helper()
	sigs, errs := NewIndex(context.Background(), candidates, b).Find(image)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return sigs
}

// trustedRoot is the trusted_root.json of a virtual sigstore: its CA and
// timestamp authority, its Rekor log when withRekor, its CT log when withCT.
func trustedRoot(t *testing.T, vs *ca.VirtualSigstore, withRekor, withCT bool) []byte {
	t.Helper()
	return sigtest.TrustedRoot(t, vs, withRekor, withCT)
}

func virtualSigstore(t *testing.T) *ca.VirtualSigstore {
	t.Helper()
	return sigtest.NewVirtualSigstore(t)
}

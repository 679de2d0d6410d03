package layout

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// FuzzFind: whatever an archive's candidate manifest and the blob it may
// point at hold, finding an image's signatures never panics; what is found
// is content that matches its descriptor, of a known kind, claimed by the
// candidate; what cannot be read is an error naming the candidate.
func FuzzFind(f *testing.F) {
	b := sigtest.Blobs{}
	img := b.Image(f, "1.0")
	k := sigtest.NewKey(f)
	legacy := b.Legacy(f, img.Digest, k)
	ref := b.Referrer(f, img, sigtest.KeyBundle(f, k, sigtest.Statement(f, img.Digest)))
	layerOf := func(m ocispec.Descriptor) []byte {
		var mf ocispec.Manifest
		if err := json.Unmarshal(b[m.Digest], &mf); err != nil || len(mf.Layers) == 0 {
			f.Fatalf("manifest %s: %v", m.Digest, err)
		}
		return b[mf.Layers[0].Digest]
	}
	testenv.Seeds(f, map[string][]any{
		"legacy":   {b[legacy.Digest], layerOf(legacy), oci.SignatureTag(img.Digest), uint8(0)},
		"referrer": {b[ref.Digest], layerOf(ref), "", uint8(1)},
		"junk":     {[]byte(`{"layers":[{"digest":"sha256:00","size":-1}],"subject":{}}`), []byte("{}"), "x.sig", uint8(2)},
	})
	f.Fuzz(func(t *testing.T, manifest, blob []byte, tag string, mt uint8) {
		store := maps.Clone(b)
		store.Put("", blob)
		m := store.Put([]string{ocispec.MediaTypeImageManifest, oci.MediaTypeDockerManifest, "", ocispec.MediaTypeImageIndex}[mt%4], manifest)
		if tag != "" {
			m.Annotations = map[string]string{ocispec.AnnotationRefName: sigtest.Repo + ":" + tag}
		}
		sigs, errs := NewIndex(context.Background(), []ocispec.Descriptor{m}, store).Find(img)
		for _, s := range sigs {
			if s.Kind != KindSimpleSigning && s.Kind != KindBundle {
				t.Fatalf("a signature of kind %q", s.Kind)
			}
			if s.Manifest.Digest != m.Digest {
				t.Fatalf("a signature of manifest %s, not the candidate's", s.Manifest.Digest)
			}
			if s.Layer.Digest.Validate() != nil || s.Layer.Digest.Algorithm().FromBytes(s.Content) != s.Layer.Digest {
				t.Fatalf("content that does not match its layer %s", s.Layer.Digest)
			}
		}
		for _, err := range errs {
			if !strings.HasPrefix(err.Error(), "manifest "+m.Digest.String()+": ") {
				t.Fatalf("error %q does not name the candidate", err)
			}
		}
	})
}

package layout

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
)

// tagged names a candidate as Zarf does the .sig records it carries.
func tagged(d ocispec.Descriptor, image digest.Digest) ocispec.Descriptor {
	d.Annotations = map[string]string{ocispec.AnnotationRefName: sigtest.Repo + ":" + oci.SignatureTag(image)}
	return d
}

// lookup finds image's signatures among candidates.
func lookup(b sigtest.Blobs, candidates []ocispec.Descriptor, image ocispec.Descriptor) ([]Signature, []error) {
	return NewIndex(context.Background(), candidates, b).Find(image)
}

// TestIndexClaims: which candidates claim which image, read once for all
// of them: by subject, by tag, by payload, whatever the order and the
// number of names; what cannot be read concerns the images it may claim
// and leaves the others found.
func TestIndexClaims(t *testing.T) {
	b := sigtest.Blobs{}
	img, other, third := b.Image(t, "1.0"), b.Image(t, "2.0"), b.Image(t, "3.0")
	k := sigtest.NewKey(t)
	// layer is the single layer of a signature manifest.
	layer := func(m ocispec.Descriptor) ocispec.Descriptor {
		var mf ocispec.Manifest
		if err := json.Unmarshal(b[m.Digest], &mf); err != nil {
			t.Fatal(err)
		}
		return mf.Layers[0]
	}
	without := func(d ocispec.Descriptor) sigtest.Blobs {
		c := maps.Clone(b)
		delete(c, d.Digest)
		return c
	}
	sigImg, sigOther := b.Legacy(t, img.Digest, k), b.Legacy(t, other.Digest, k)
	refImg := b.Referrer(t, img, sigtest.KeyBundle(t, k, sigtest.Statement(t, img.Digest)))
	missing := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("gone"), Size: 4}
	// Two simple-signing layers, one per image, in one manifest.
	two := b.Manifest(t, b.SigLayer(sigtest.Payload(t, sigtest.Repo, img.Digest), nil), b.SigLayer(sigtest.Payload(t, sigtest.Repo, other.Digest), nil))
	var twoLayers []ocispec.Descriptor
	{
		var mf ocispec.Manifest
		if err := json.Unmarshal(b[two.Digest], &mf); err != nil {
			t.Fatal(err)
		}
		twoLayers = mf.Layers
	}
	// The legacy manifest as a referrer of subject.
	asReferrer := func(sig, subject ocispec.Descriptor) ocispec.Descriptor {
		var m ocispec.Manifest
		if err := json.Unmarshal(b[sig.Digest], &m); err != nil {
			t.Fatal(err)
		}
		m.Subject = &ocispec.Descriptor{MediaType: subject.MediaType, Digest: subject.Digest, Size: subject.Size}
		return b.PutJSON(t, ocispec.MediaTypeImageManifest, m)
	}
	slsa := b.Attestation(t, img, sigtest.KeyBundle(t, k, sigtest.StatementOf(t, img.Digest, "https://slsa.dev/provenance/v1")), "https://slsa.dev/provenance/v1")
	unsaid := b.Attestation(t, img, sigtest.KeyBundle(t, k, sigtest.StatementOf(t, img.Digest, "https://slsa.dev/provenance/v1")), "")
	refOfOther := asReferrer(sigImg, other) // its payload names img

	// want is what one image finds: its signatures as manifest/layer, and
	// the manifests whose errors it gets.
	type want struct {
		image ocispec.Descriptor
		sigs  [][2]ocispec.Descriptor
		errs  []ocispec.Descriptor
	}
	for _, c := range []struct {
		name       string
		b          sigtest.Blobs
		candidates []ocispec.Descriptor
		want       []want
	}{
		{
			name:       "an unreadable candidate concerns every image, and leaves the others found",
			b:          b,
			candidates: []ocispec.Descriptor{sigImg, missing, sigOther},
			want: []want{
				{image: img, sigs: [][2]ocispec.Descriptor{{sigImg, layer(sigImg)}}, errs: []ocispec.Descriptor{missing}},
				{image: other, sigs: [][2]ocispec.Descriptor{{sigOther, layer(sigOther)}}, errs: []ocispec.Descriptor{missing}},
				{image: third, errs: []ocispec.Descriptor{missing}},
			},
		},
		{
			name:       "an unreadable layer of a .sig manifest concerns every image",
			b:          without(layer(sigImg)),
			candidates: []ocispec.Descriptor{sigOther, tagged(sigImg, img.Digest)},
			want: []want{
				{image: img, errs: []ocispec.Descriptor{sigImg}},
				{image: other, sigs: [][2]ocispec.Descriptor{{sigOther, layer(sigOther)}}, errs: []ocispec.Descriptor{sigImg}},
			},
		},
		{
			name:       "an unreadable layer of a referrer concerns its subject alone",
			b:          without(layer(refImg)),
			candidates: []ocispec.Descriptor{refImg, sigOther, missing},
			want: []want{
				{image: img, errs: []ocispec.Descriptor{refImg, missing}},
				{image: other, sigs: [][2]ocispec.Descriptor{{sigOther, layer(sigOther)}}, errs: []ocispec.Descriptor{missing}},
			},
		},
		{
			name:       "a manifest claimed by tag keeps its layer naming another digest, which that image finds too",
			b:          b,
			candidates: []ocispec.Descriptor{tagged(sigOther, img.Digest)},
			want: []want{
				{image: img, sigs: [][2]ocispec.Descriptor{{tagged(sigOther, img.Digest), layer(sigOther)}}},
				{image: other, sigs: [][2]ocispec.Descriptor{{tagged(sigOther, img.Digest), layer(sigOther)}}},
				{image: third},
			},
		},
		{
			name:       "each layer of an untagged manifest is the image its payload names; tagged, all are",
			b:          b,
			candidates: []ocispec.Descriptor{two},
			want: []want{
				{image: img, sigs: [][2]ocispec.Descriptor{{two, twoLayers[0]}}},
				{image: other, sigs: [][2]ocispec.Descriptor{{two, twoLayers[1]}}},
			},
		},
		{
			name:       "tagged, a manifest's layers are all its image's",
			b:          b,
			candidates: []ocispec.Descriptor{tagged(two, other.Digest)},
			want: []want{
				{image: img, sigs: [][2]ocispec.Descriptor{{tagged(two, other.Digest), twoLayers[0]}}},
				{image: other, sigs: [][2]ocispec.Descriptor{{tagged(two, other.Digest), twoLayers[0]}, {tagged(two, other.Digest), twoLayers[1]}}},
			},
		},
		{
			name:       "a referrer with a predicate other than a signature's is not read",
			b:          without(layer(slsa)),
			candidates: []ocispec.Descriptor{slsa, unsaid},
			want: []want{
				{image: img, sigs: [][2]ocispec.Descriptor{{unsaid, layer(unsaid)}}},
			},
		},
		{
			name:       "a referrer is its subject's, whatever its payload names",
			b:          b,
			candidates: []ocispec.Descriptor{refOfOther, tagged(refOfOther, img.Digest)},
			want: []want{
				{image: img},
				{image: other, sigs: [][2]ocispec.Descriptor{{refOfOther, layer(refOfOther)}}},
			},
		},
		{
			name:       "a manifest under two names is found once, as its first",
			b:          b,
			candidates: []ocispec.Descriptor{tagged(sigImg, other.Digest), sigOther, tagged(sigImg, img.Digest), sigImg},
			want: []want{
				{image: img, sigs: [][2]ocispec.Descriptor{{tagged(sigImg, other.Digest), layer(sigImg)}}},
				{image: other, sigs: [][2]ocispec.Descriptor{{tagged(sigImg, other.Digest), layer(sigImg)}, {sigOther, layer(sigOther)}}},
				{image: third},
			},
		},
		{
			name:       "signatures come in the order of the candidates",
			b:          b,
			candidates: []ocispec.Descriptor{refImg, sigOther, tagged(sigOther, img.Digest), sigImg},
			want: []want{
				// The manifest tagged for img is found as the first
				// candidate of its digest.
				{image: img, sigs: [][2]ocispec.Descriptor{{refImg, layer(refImg)}, {sigOther, layer(sigOther)}, {sigImg, layer(sigImg)}}},
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, w := range c.want {
				image := w.image
				sigs, errs := lookup(c.b, c.candidates, image)
				var got [][2]ocispec.Descriptor
				for _, s := range sigs {
					got = append(got, [2]ocispec.Descriptor{s.Manifest, s.Layer})
				}
				if !slices.EqualFunc(got, w.sigs, func(a, b [2]ocispec.Descriptor) bool {
					return a[0].Digest == b[0].Digest && maps.Equal(a[0].Annotations, b[0].Annotations) && a[1].Digest == b[1].Digest
				}) {
					t.Errorf("image %s: found %s, want %s", image.Digest, show(got), show(w.sigs))
				}
				if len(errs) != len(w.errs) {
					t.Errorf("image %s: errors %v, want %d", image.Digest, errs, len(w.errs))
					continue
				}
				for i, e := range errs {
					if !strings.HasPrefix(e.Error(), "manifest "+w.errs[i].Digest.String()+": ") {
						t.Errorf("image %s: error %d is %q, want one of manifest %s", image.Digest, i, e, w.errs[i].Digest)
					}
				}
			}
		})
	}
}

// show lists manifest/layer pairs by digest, and the manifest's name.
func show(sigs [][2]ocispec.Descriptor) string {
	var out []string
	for _, s := range sigs {
		out = append(out, s[0].Digest.Encoded()[:12]+"/"+s[1].Digest.Encoded()[:12]+" "+s[0].Annotations[ocispec.AnnotationRefName])
	}
	return "[" + strings.Join(out, ", ") + "]"
}
func TestFindReadError(t *testing.T) {
	b := sigtest.Blobs{}
	img := b.Image(t, "1.0")
	missing := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("gone"), Size: 4}
	if _, errs := NewIndex(context.Background(), []ocispec.Descriptor{missing}, b).Find(img); len(errs) == 0 {
		t.Fatal("Find hid a manifest it could not read")
	}
}

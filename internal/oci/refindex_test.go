package oci

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// TestReferrersIndex: the index lists each referrer once, sorted by digest,
// with what its manifest says (artifact type, the config's media type when
// it names none, annotations, its size); the same bytes whatever the order
// given; a manifest it has no bytes of is listed as its descriptor says.
func TestReferrersIndex(t *testing.T) {
	bundle := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"application/vnd.dev.sigstore.bundle.v0.3+json","config":{"mediaType":"application/vnd.oci.empty.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},"annotations":{"dev.sigstore.bundle.predicateType":"https://sigstore.dev/cosign/sign/v1"}}`)
	sbom := []byte(`{"schemaVersion":2,"config":{"mediaType":"application/spdx+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2}}`)
	missing := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("gone"), Size: 9, ArtifactType: "application/x-gone"}
	docs := map[digest.Digest][]byte{digest.FromBytes(bundle): bundle, digest.FromBytes(sbom): sbom}
	descs := []ocispec.Descriptor{
		{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(bundle), Size: 1},
		{Digest: digest.FromBytes(sbom)},
		missing,
		{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(bundle)},
	}
	data, desc, err := ReferrersIndex(descs, docs)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != digest.FromBytes(data) || desc.Size != int64(len(data)) || desc.MediaType != ocispec.MediaTypeImageIndex {
		t.Errorf("descriptor %+v does not describe the %d bytes", desc, len(data))
	}
	reversed := []ocispec.Descriptor{descs[3], descs[2], descs[1], descs[0]}
	if again, _, _ := ReferrersIndex(reversed, docs); !bytes.Equal(again, data) {
		t.Errorf("another order gave other bytes:\n%s\n%s", data, again)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(data, &idx); err != nil {
		t.Fatal(err)
	}
	if idx.SchemaVersion != 2 || idx.MediaType != ocispec.MediaTypeImageIndex || len(idx.Manifests) != 3 {
		t.Fatalf("index %s: want schema 2, an image index of 3 manifests", data)
	}
	byDigest := map[digest.Digest]ocispec.Descriptor{}
	for i, m := range idx.Manifests {
		if i > 0 && idx.Manifests[i-1].Digest >= m.Digest {
			t.Errorf("manifests not sorted by digest: %s", data)
		}
		byDigest[m.Digest] = m
	}
	b := byDigest[digest.FromBytes(bundle)]
	if b.ArtifactType != MediaTypeSigstoreBundle || b.Size != int64(len(bundle)) || b.Annotations[AnnotationBundlePredicateType] != PredicateCosignSign {
		t.Errorf("the bundle referrer is listed as %+v", b)
	}
	if s := byDigest[digest.FromBytes(sbom)]; s.ArtifactType != "application/spdx+json" || s.MediaType != ocispec.MediaTypeImageManifest {
		t.Errorf("a referrer without artifactType is listed as %+v, want its config's media type", s)
	}
	if m := byDigest[missing.Digest]; m.ArtifactType != missing.ArtifactType || m.Size != missing.Size || m.Annotations != nil {
		t.Errorf("a referrer without bytes is listed as %+v, want %+v", m, missing)
	}
}

// TestReferrersRecord: the names of an image's signatures in a repository,
// and the referrers tag told from other tags.
func TestReferrersRecord(t *testing.T) {
	d := digest.FromString("image")
	if got, want := SignatureRecord(Repository("example.com:5000/team/app:1"), d), "example.com:5000/team/app:sha256-"+d.Encoded()+".sig"; got != want {
		t.Errorf("SignatureRecord = %s, want %s", got, want)
	}
	name := ReferrersRecord(Repository("example.com/team/app@"+d.String()), d)
	if got, ok := ParseReferrersRecord(name); !ok || got != d || name != "example.com/team/app:sha256-"+d.Encoded() {
		t.Errorf("ParseReferrersRecord(%s) = %s, %v", name, got, ok)
	}
	for _, n := range []string{"example.com/team/app:1", "example.com/team/app:sha256-" + d.Encoded() + ".sig", "example.com/team/app:sha256-abc", "example.com:5000/team/app", "example.com/team/app@" + d.String()} {
		if _, ok := ParseReferrersRecord(n); ok {
			t.Errorf("%s is taken for a referrers tag", n)
		}
	}
}

// TestSignedBy: cosign's tags and the referrers tag name the image they
// stand beside; an image's own tag, a digest name and a tag of another
// shape do not.
func TestSignedBy(t *testing.T) {
	img := digest.FromString("image")
	hex := img.Encoded()
	for name, want := range map[string]digest.Digest{
		"example.com/app:sha256-" + hex + ".sig": img,
		"example.com/app:sha256-" + hex + ".att": img,
		"example.com/app:sha256-" + hex:          img,
		"localhost:5000/app:sha256-" + hex:       img,
		"example.com/app:1":                      "",
		"example.com/app@" + img.String():        "",
		"example.com/app:sha256-" + hex[:10]:     "",
		"example.com/sha256-" + hex + "/app:1.0": "",
	} {
		got, ok := SignedBy(name)
		if got != want || ok != (want != "") {
			t.Errorf("SignedBy(%s) = %s, %v; want %s, %v", name, got, ok, want, want != "")
		}
	}
}

package exporter_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/exporter"
	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
)

// releaseSource imports an OCI archive of a two-platform image with the
// referrers a release lists (an SBOM, and a signature of the index, of
// each platform's manifest and of the SBOM) into a fresh fake.
func releaseSource(t *testing.T, name string) (*fake.Runtime, *fixture.Image, []fixture.Artifact) {
	t.Helper()
	img := build(t, fixture.ImageSpec{Names: []string{name}, Platforms: []fixture.Platform{fixture.HostPlatform(), otherPlatform()},
		Layers: fixture.UniformLayers(1, 8<<10, false, 91)})
	refs, err := fixture.ReleaseReferrers(img)
	if err != nil {
		t.Fatal(err)
	}
	rt := fake.New()
	importArchive(t, rt, "/images/release.tar", ociArchive(t, fixture.OCIOptions{Artifacts: refs}, img))
	return rt, img, refs
}

// exportedEntries are index.json's entries of an exported tar, and its
// blobs by digest.
func exportedEntries(t *testing.T, out []byte) ([]ocispec.Descriptor, map[digest.Digest][]byte) {
	t.Helper()
	files := readTar(t, out)
	raw, _ := fileNamed(files, "index.json")
	var idx ocispec.Index
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	blobs := map[digest.Digest][]byte{}
	for _, f := range files {
		if hex, ok := strings.CutPrefix(f.hdr.Name, "blobs/sha256/"); ok {
			blobs[digest.NewDigestFromEncoded(digest.SHA256, hex)] = f.data
		}
	}
	return idx.Manifests, blobs
}

// TestExportCarriesReferrers: the export of an image imported with an SBOM
// referrer and signatures of its index, its platforms' manifests and the
// SBOM lists each as the archive did (same digest, artifact type and
// subject), every blob of them byte for byte, and nothing it does not
// hold; imported again, the referrers are kept again.
func TestExportCarriesReferrers(t *testing.T) {
	rt, img, refs := releaseSource(t, "example.com/release/app:1")
	out, p := export(t, rt, exporter.Selection{Patterns: patterns(t, "example.com/release/app:1")})
	requireWhole(t, out)
	entries, blobs := exportedEntries(t, out)
	for _, a := range refs {
		subject := a.Descriptor.Annotations[oci.AnnotationManifestSubject]
		if !slices.ContainsFunc(entries, func(e ocispec.Descriptor) bool {
			return e.Digest == a.Descriptor.Digest && e.ArtifactType == a.Descriptor.ArtifactType && e.Annotations[oci.AnnotationManifestSubject] == subject
		}) {
			t.Errorf("index.json lists no referrer %s of type %s and subject %s: %+v", a.Descriptor.Digest, a.Descriptor.ArtifactType, subject, entries)
		}
		for _, b := range a.Blobs {
			if got, ok := blobs[digest.FromBytes(b)]; !ok || !bytes.Equal(got, b) {
				t.Errorf("blob %s of referrer %s: in the archive %v, the same bytes %v", digest.FromBytes(b), a.Descriptor.Digest, ok, bytes.Equal(got, b))
			}
		}
	}
	if len(entries) != 1+len(refs) || p.Referrers != len(refs)-1 || len(p.Warnings) != 0 {
		t.Errorf("index.json lists %d entries, the plan %d referrers, warnings %q; want the image and %d referrers, %d besides the index's signature, none", len(entries), p.Referrers, p.Warnings, len(refs), len(refs)-1)
	}
	again := fake.New()
	res := importArchive(t, again, "/images/export.tar", out)
	st, _ := again.State(res.Lease)
	if n := len(st.Referrers[img.Target.Digest]); n != len(refs)-1 {
		t.Errorf("the export imported again keeps %d referrers of the image, want %d", n, len(refs)-1)
	}
}

// TestExportReferrerBlobLost: a referrer whose layer the store lost is
// left out with a warning naming it, and so is its own signature; the
// image and its other referrers are written whole.
func TestExportReferrerBlobLost(t *testing.T) {
	rt, _, refs := releaseSource(t, "example.com/release/lost:1")
	var m ocispec.Manifest
	if err := json.Unmarshal(refs[0].Blobs[0], &m); err != nil {
		t.Fatal(err)
	}
	rt.DeleteBlob(m.Layers[0].Digest)
	out, p := export(t, rt, exporter.Selection{Patterns: patterns(t, "example.com/release/lost:1")})
	requireWhole(t, out)
	entries, _ := exportedEntries(t, out)
	for i, a := range refs {
		listed := slices.ContainsFunc(entries, func(e ocispec.Descriptor) bool { return e.Digest == a.Descriptor.Digest })
		if lost := i == 0 || i == 2; listed == lost {
			t.Errorf("referrer %d (%s): listed %v, want %v", i, a.Descriptor.Digest, listed, !lost)
		}
	}
	if !slices.ContainsFunc(p.Warnings, func(w string) bool {
		return strings.Contains(w, refs[0].Descriptor.Digest.String()) && strings.Contains(w, m.Layers[0].Digest.String())
	}) {
		t.Errorf("warnings %q do not name the SBOM %s and its layer %s", p.Warnings, refs[0].Descriptor.Digest, m.Layers[0].Digest)
	}
}

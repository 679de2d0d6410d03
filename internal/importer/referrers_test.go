package importer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/importer"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
)

// releaseArchive is an OCI archive of a two-platform image with the
// referrers a release lists (fixture.ReleaseReferrers: an SBOM, and a
// signature of the index, of each platform's manifest and of the SBOM),
// leaving out the blobs omit names; and the referrers.
func releaseArchive(t *testing.T, name string, omit ...digest.Digest) (*fixture.Image, []fixture.Artifact, func() (io.ReadCloser, error)) {
	t.Helper()
	other := fixture.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}
	if fixture.HostPlatform().Architecture == "arm64" {
		other = fixture.Platform{OS: "linux", Architecture: "amd64"}
	}
	img, err := fixture.Build(context.Background(), fixture.ImageSpec{Names: []string{name}, Platforms: []fixture.Platform{fixture.HostPlatform(), other},
		Layers: fixture.UniformLayers(1, 8<<10, false, 21)})
	if err != nil {
		t.Fatal(err)
	}
	refs, err := fixture.ReleaseReferrers(img)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := fixture.WriteOCI(context.Background(), &buf, fixture.OCIOptions{Artifacts: refs, OmitBlobs: omit}, img); err != nil {
		t.Fatal(err)
	}
	return img, refs, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil }
}

// referrerLayer is the first layer of the referrer manifest a.
func referrerLayer(t *testing.T, a fixture.Artifact) digest.Digest {
	t.Helper()
	var m ocispec.Manifest
	if err := json.Unmarshal(a.Blobs[0], &m); err != nil || len(m.Layers) == 0 {
		t.Fatalf("referrer %s: %v", a.Descriptor.Digest, err)
	}
	return m.Layers[0].Digest
}

// TestImportKeepsReferrers: an import of an image with an SBOM referrer
// and signatures of its index, of its platforms' manifests and of the SBOM
// keeps, besides the index's signature (a signature, as before), the SBOM
// and the other signatures as the image's referrers with their subjects:
// every blob written, held by the lease and listed among those the source
// needs; none of them is an image record, and they are still counted as
// skipped referrers. Imported again, the source is unchanged.
func TestImportKeepsReferrers(t *testing.T) {
	ctx := context.Background()
	rt := fake.New()
	img, refs, open := releaseArchive(t, "example.com/release/app:1")
	req := runtime.ImportRequest{Source: "/images/release.tar", Identity: "id-1", Signed: true, Open: open}
	res, err := importer.Import(ctx, rt.ImportStore(), req)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := rt.State(res.Lease)
	if sigs := st.Signatures[img.Target.Digest]; len(sigs) != 1 || sigs[0].Digest != refs[1].Descriptor.Digest {
		t.Errorf("the image's signatures are %v, want only the index's %s", sigs, refs[1].Descriptor.Digest)
	}
	kept := st.Referrers[img.Target.Digest]
	want := []fixture.Artifact{refs[0], refs[2], refs[3], refs[4]} // the SBOM, its signature, the platforms'
	if len(kept) != len(want) {
		t.Fatalf("the state keeps %d referrers of the image, want %d: %+v", len(kept), len(want), kept)
	}
	for _, a := range want {
		i := slices.IndexFunc(kept, func(d ocispec.Descriptor) bool { return d.Digest == a.Descriptor.Digest })
		if i < 0 {
			t.Errorf("referrer %s (subject %s) is not kept", a.Descriptor.Digest, a.Descriptor.Annotations[oci.AnnotationManifestSubject])
			continue
		}
		if k := kept[i]; k.ArtifactType != a.Descriptor.ArtifactType || k.Annotations[oci.AnnotationManifestSubject] != a.Descriptor.Annotations[oci.AnnotationManifestSubject] || k.Size != a.Descriptor.Size {
			t.Errorf("referrer %s kept as %+v, want artifact type %s, subject %s, size %d", a.Descriptor.Digest, k, a.Descriptor.ArtifactType, a.Descriptor.Annotations[oci.AnnotationManifestSubject], a.Descriptor.Size)
		}
		for _, b := range a.Blobs {
			d := digest.FromBytes(b)
			got, err := rt.ImportStore().ReadBlob(ctx, ocispec.Descriptor{Digest: d, Size: int64(len(b))})
			if err != nil || !bytes.Equal(got, b) || !rt.LeaseHolds(res.Lease, d) || !slices.Contains(st.Blobs, d) {
				t.Errorf("blob %s of referrer %s: in the store %v (%v), held by the lease %v, listed in the state's blobs %v", d, a.Descriptor.Digest, bytes.Equal(got, b), err, rt.LeaseHolds(res.Lease, d), slices.Contains(st.Blobs, d))
			}
		}
	}
	for _, w := range res.Images {
		if slices.ContainsFunc(refs, func(a fixture.Artifact) bool { return a.Descriptor.Digest == w.Target.Digest }) && w.Signs == "" {
			t.Errorf("the import made an image record %s of referrer %s", w.Name, w.Target.Digest)
		}
	}
	if st.Skipped["referrer"] != len(refs) || !st.ReferrersKept {
		t.Errorf("the state counts %v skipped, referrers kept %v; want %d referrers skipped, kept", st.Skipped, st.ReferrersKept, len(refs))
	}
	again, err := importer.Import(ctx, rt.ImportStore(), req)
	if err != nil || !again.Unchanged {
		t.Errorf("imported again: unchanged %v, %v; want unchanged", again.Unchanged, err)
	}
}

// TestImportReferrerBlobMissing: a referrer whose layer the archive lacks
// (and the store too) is left out, named, with the referrers of it; the
// image and its other referrers are kept.
func TestImportReferrerBlobMissing(t *testing.T) {
	ctx := context.Background()
	rt := fake.New()
	_, refs, _ := releaseArchive(t, "example.com/release/app:1")
	lost := referrerLayer(t, refs[0])
	img, _, open := releaseArchive(t, "example.com/release/app:1", lost)
	res, err := importer.Import(ctx, rt.ImportStore(), runtime.ImportRequest{Source: "/images/release.tar", Identity: "id-1", Open: open})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := rt.State(res.Lease)
	var got []digest.Digest
	for _, d := range st.Referrers[img.Target.Digest] {
		got = append(got, d.Digest)
	}
	want := []digest.Digest{refs[3].Descriptor.Digest, refs[4].Descriptor.Digest} // the platforms' signatures
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("kept referrers %v, want the platforms' signatures only %v", got, want)
	}
	if !slices.ContainsFunc(res.Skipped, func(s string) bool {
		return strings.Contains(s, refs[0].Descriptor.Digest.String()) && strings.Contains(s, "left out") && strings.Contains(s, lost.String())
	}) {
		t.Errorf("the import does not name the SBOM %s left out for its layer %s: %q", refs[0].Descriptor.Digest, lost, res.Skipped)
	}
	if len(res.Images) == 0 || !rt.LeaseHolds(res.Lease, img.Target.Digest) {
		t.Errorf("the image was not imported: %v", res.Images)
	}
}

// TestImportAgainWhenReferrersNotKept: a source whose state was written
// before holdfast kept referrers, and which skipped some, is imported
// again, and then keeps them; one that skipped none is unchanged.
func TestImportAgainWhenReferrersNotKept(t *testing.T) {
	ctx := context.Background()
	rt := fake.New()
	img, _, open := releaseArchive(t, "example.com/release/app:1")
	req := runtime.ImportRequest{Source: "/images/release.tar", Identity: "id-1", Open: open}
	res, err := importer.Import(ctx, rt.ImportStore(), req)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := rt.State(res.Lease)
	old := st
	old.Referrers, old.ReferrersKept = nil, false
	rt.PutState(old)
	again, err := importer.Import(ctx, rt.ImportStore(), req)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := rt.State(again.Lease); again.Unchanged || len(st.Referrers[img.Target.Digest]) == 0 {
		t.Errorf("a state that kept no referrers: unchanged %v, referrers kept again %d; want imported again, keeping them", again.Unchanged, len(st.Referrers[img.Target.Digest]))
	}
	plain := image(t, "example.com/release/plain:1", 22)
	var buf bytes.Buffer
	if err := fixture.WriteOCI(ctx, &buf, fixture.OCIOptions{}, plain); err != nil {
		t.Fatal(err)
	}
	preq := runtime.ImportRequest{Source: "/images/plain.tar", Identity: "id-2", Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil }}
	pres, err := importer.Import(ctx, rt.ImportStore(), preq)
	if err != nil {
		t.Fatal(err)
	}
	pst, _ := rt.State(pres.Lease)
	pst.ReferrersKept = false
	rt.PutState(pst)
	if again, err := importer.Import(ctx, rt.ImportStore(), preq); err != nil || !again.Unchanged {
		t.Errorf("a source that skipped no referrer, from before: unchanged %v, %v; want unchanged", again.Unchanged, err)
	}
}

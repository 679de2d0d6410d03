package importer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/importer"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
)

// TestImportNamesSignatures: an import names each signature it keeps as a
// registry holds it, for each repository the image is named in: the legacy
// <repo>:sha256-<hex>.sig at the .sig manifest, the referrers tag
// <repo>:sha256-<hex> at an index of the bundle referrers it writes (a valid
// referrers response, the same bytes from another import of the same
// archive), held by the lease and listed among the blobs the source needs.
// What the records name are peer copies of the signature manifests kept:
// each the same manifest but for its config and layers, which carry their
// blobs in data; the copies held by the lease and listed among the blobs
// too, and the state's signatures the manifests kept.
func TestImportNamesSignatures(t *testing.T) {
	ctx := context.Background()
	img, err := fixture.Build(ctx, fixture.ImageSpec{Names: []string{"example.com/signed/app:1", "example.org/mirror/app:1"},
		Layers: fixture.UniformLayers(1, 1<<10, false, 21)})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := fixture.WriteHaul(ctx, &buf, fixture.HaulOptions{Signatures: true, Referrers: true}, img); err != nil {
		t.Fatal(err)
	}
	open := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil }
	rt := fake.New()
	res, err := importer.Import(ctx, rt.ImportStore(), runtime.ImportRequest{Source: "/images/signed.tar", Identity: "id-1", Open: open})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := rt.State(res.Lease)
	sigs := map[digest.Digest]bool{}
	for _, d := range st.Signatures[img.Target.Digest] {
		sigs[d.Digest] = true
	}
	wants := map[string]runtime.Want{}
	for _, w := range st.Images {
		wants[w.Name] = w
	}
	var index digest.Digest
	for _, repo := range []string{"example.com/signed/app", "example.org/mirror/app"} {
		legacy, ok := wants[repo+":"+oci.SignatureTag(img.Target.Digest)]
		if !ok || legacy.Signs != img.Target.Digest || !sigs[peerCopyOf(t, rt, legacy.Target, st)] || legacy.Target.MediaType != ocispec.MediaTypeImageManifest {
			t.Errorf("the .sig record of %s: %+v (found %v), want a manifest of the image's signatures %v, signing %s", repo, legacy, ok, st.Signatures[img.Target.Digest], img.Target.Digest)
		}
		if ok && !bytes.Contains(readBlob(t, rt, legacy.Target), []byte(oci.MediaTypeSimpleSigning)) {
			t.Errorf("the .sig record of %s points at no simple-signing manifest", repo)
		}
		refs, ok := wants[oci.ReferrersRecord(repo, img.Target.Digest)]
		if !ok || refs.Signs != img.Target.Digest || refs.Target.MediaType != ocispec.MediaTypeImageIndex {
			t.Fatalf("the referrers record of %s: %+v (found %v)", repo, refs, ok)
		}
		if index != "" && refs.Target.Digest != index {
			t.Errorf("the referrers records point at two indexes, %s and %s", index, refs.Target.Digest)
		}
		index = refs.Target.Digest
		if !rt.LeaseHolds(res.Lease, index) || !slices.Contains(st.Blobs, index) {
			t.Errorf("the referrers index %s: held by the lease %v, listed in the state's blobs %v", index, rt.LeaseHolds(res.Lease, index), slices.Contains(st.Blobs, index))
		}
	}
	var idx ocispec.Index
	if err := json.Unmarshal(readBlob(t, rt, wants[oci.ReferrersRecord("example.com/signed/app", img.Target.Digest)].Target), &idx); err != nil {
		t.Fatal(err)
	}
	if idx.SchemaVersion != 2 || idx.MediaType != ocispec.MediaTypeImageIndex || len(idx.Manifests) == 0 {
		t.Fatalf("the referrers index is not one: %+v", idx)
	}
	for _, m := range idx.Manifests {
		raw := readBlob(t, rt, m)
		var rm ocispec.Manifest
		if err := json.Unmarshal(raw, &rm); err != nil || rm.Subject == nil || rm.Subject.Digest != img.Target.Digest {
			t.Errorf("the index lists %s, whose subject is not the image (%v)", m.Digest, err)
		}
		if !sigs[peerCopyOf(t, rt, m, st)] || m.ArtifactType != rm.ArtifactType || m.ArtifactType == "" || m.Size != int64(len(raw)) || !maps.Equal(m.Annotations, rm.Annotations) {
			t.Errorf("the index lists %+v; the referrer says artifactType %q, annotations %v, %d bytes", m, rm.ArtifactType, rm.Annotations, len(raw))
		}
	}
	// Another node importing the same archive writes the same index.
	other := fake.New()
	res2, err := importer.Import(ctx, other.ImportStore(), runtime.ImportRequest{Source: "/elsewhere/signed.tar", Identity: "id-2", Open: open})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(res2.Images, func(w runtime.Want) bool { return w.Target.Digest == index }) {
		t.Errorf("another import of the archive wrote another referrers index than %s: %+v", index, res2.Images)
	}
}

// TestImportAgainWhenSignaturesUnnamed: a source whose state keeps
// signatures but names none of them (written before holdfast named them)
// is imported again, and the new state names them.
func TestImportAgainWhenSignaturesUnnamed(t *testing.T) {
	ctx := context.Background()
	rt := fake.New()
	img := image(t, "example.com/signed/named:1", 22)
	req := runtime.ImportRequest{Source: "/images/named.tar", Identity: "id-1", Open: signedHaul(t, img)}
	res, err := importer.Import(ctx, rt.ImportStore(), req)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := rt.State(res.Lease)
	old := st
	old.Images = slices.DeleteFunc(slices.Clone(st.Images), func(w runtime.Want) bool { return w.Signs != "" })
	if len(old.Images) == len(st.Images) {
		t.Fatalf("the import named no signature: %+v", st.Images)
	}
	rt.PutState(old)
	again, err := importer.Import(ctx, rt.ImportStore(), req)
	if err != nil {
		t.Fatal(err)
	}
	if again.Unchanged || !slices.ContainsFunc(again.Images, func(w runtime.Want) bool { return w.Signs == img.Target.Digest }) {
		t.Errorf("unchanged %v, wants %+v: want the source imported again, naming its signatures", again.Unchanged, again.Images)
	}
	third, err := importer.Import(ctx, rt.ImportStore(), req)
	if err != nil || !third.Unchanged {
		t.Errorf("the import after it: unchanged %v, %v; want unchanged", third.Unchanged, err)
	}
}

// TestImportAgainWhenSignaturesNotCopied: a source whose state names its
// signatures by the manifests kept (written before the records named peer
// copies) is imported again, and the new state's records name the copies.
func TestImportAgainWhenSignaturesNotCopied(t *testing.T) {
	ctx := context.Background()
	rt := fake.New()
	img := image(t, "example.com/signed/copied:1", 23)
	req := runtime.ImportRequest{Source: "/images/copied.tar", Identity: "id-1", Open: signedHaul(t, img)}
	res, err := importer.Import(ctx, rt.ImportStore(), req)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := rt.State(res.Lease)
	if !st.PeerCopies {
		t.Fatal("the import's state says its records name no peer copies")
	}
	old := st
	old.PeerCopies = false
	rt.PutState(old)
	again, err := importer.Import(ctx, rt.ImportStore(), req)
	if err != nil {
		t.Fatal(err)
	}
	if again.Unchanged || !again.State.PeerCopies {
		t.Errorf("unchanged %v, peer copies %v: want the source imported again, its records naming peer copies", again.Unchanged, again.State.PeerCopies)
	}
	third, err := importer.Import(ctx, rt.ImportStore(), req)
	if err != nil || !third.Unchanged {
		t.Errorf("the import after it: unchanged %v, %v; want unchanged", third.Unchanged, err)
	}
}

// peerCopyOf is the signature manifest kept of which d is the peer copy,
// "" if it is none: every descriptor of d's manifest carries its blob in
// data, and without data it is that manifest; the copy is held by the
// state's lease and listed in its blobs, and is not among its signatures.
func peerCopyOf(t *testing.T, rt *fake.Runtime, d ocispec.Descriptor, st runtime.SourceState) digest.Digest {
	t.Helper()
	var m ocispec.Manifest
	if err := json.Unmarshal(readBlob(t, rt, d), &m); err != nil {
		t.Errorf("%s: %v", d.Digest, err)
		return ""
	}
	for _, l := range append([]*ocispec.Descriptor{&m.Config}, ptrs(m.Layers)...) {
		if l.Data == nil || !bytes.Equal(l.Data, readBlob(t, rt, ocispec.Descriptor{Digest: l.Digest, Size: l.Size})) || int64(len(l.Data)) != l.Size {
			t.Errorf("%s's %s %s carries %d bytes of data, not its blob of %d", d.Digest, l.MediaType, l.Digest, len(l.Data), l.Size)
		}
		l.Data = nil
	}
	if !rt.LeaseHolds(st.Lease, d.Digest) || !slices.Contains(st.Blobs, d.Digest) {
		t.Errorf("the peer copy %s: held by the lease %v, listed in the state's blobs %v", d.Digest, rt.LeaseHolds(st.Lease, d.Digest), slices.Contains(st.Blobs, d.Digest))
	}
	for _, sigs := range st.Signatures {
		for _, s := range sigs {
			if s.Digest == d.Digest {
				t.Errorf("the peer copy %s is among the state's signatures", d.Digest)
				continue
			}
			var o ocispec.Manifest
			if err := json.Unmarshal(readBlob(t, rt, s), &o); err == nil && reflect.DeepEqual(o, m) {
				return s.Digest
			}
		}
	}
	return ""
}

func ptrs(ds []ocispec.Descriptor) []*ocispec.Descriptor {
	out := make([]*ocispec.Descriptor, len(ds))
	for i := range ds {
		out[i] = &ds[i]
	}
	return out
}

func readBlob(t *testing.T, rt *fake.Runtime, d ocispec.Descriptor) []byte {
	t.Helper()
	raw, err := rt.ImportStore().ReadBlob(context.Background(), d)
	if err != nil {
		t.Fatalf("reading %s: %v", d.Digest, err)
	}
	return raw
}

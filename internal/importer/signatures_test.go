package importer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"slices"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/importer"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
)

// signedHaul is a haul of img with its legacy .sig and .att manifests and
// a sigstore bundle referrer, as an import request opens it.
func signedHaul(t *testing.T, img *fixture.Image) func() (io.ReadCloser, error) {
	t.Helper()
	var buf bytes.Buffer
	if err := fixture.WriteHaul(context.Background(), &buf, fixture.HaulOptions{Signatures: true, Referrers: true}, img); err != nil {
		t.Fatal(err)
	}
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil }
}

// signatureBlobs are the blobs of the signature manifests st lists: each
// manifest, its config and its layers, read from rt's store.
func signatureBlobs(t *testing.T, rt *fake.Runtime, st runtime.SourceState) []digest.Digest {
	t.Helper()
	var out []digest.Digest
	for _, sigs := range st.Signatures {
		for _, d := range sigs {
			raw, err := rt.ImportStore().ReadBlob(context.Background(), d)
			if err != nil {
				t.Fatalf("reading signature manifest %s: %v", d.Digest, err)
			}
			var m ocispec.Manifest
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			out = append(out, d.Digest, m.Config.Digest)
			for _, l := range m.Layers {
				out = append(out, l.Digest)
			}
		}
	}
	return out
}

// TestImportKeepsWholeSignatures: every blob of each signature manifest an
// archive carries (the manifest, its config, its layers) is written, held
// by the source's lease and listed among the blobs the source needs, so
// that losing one makes the source not intact and an export finds them all.
func TestImportKeepsWholeSignatures(t *testing.T) {
	ctx := context.Background()
	rt := fake.New()
	img := image(t, "example.com/signed/app:1", 11)
	req := runtime.ImportRequest{Source: "/images/signed.tar", Identity: "id-1", Signed: true, Open: signedHaul(t, img)}
	res, err := importer.Import(ctx, rt.ImportStore(), req)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := rt.State(res.Lease)
	if n := len(st.Signatures[img.Target.Digest]); n < 2 {
		t.Fatalf("the import kept %d signature manifests; the haul carries a .sig and a referrer", n)
	}
	for _, d := range signatureBlobs(t, rt, st) {
		has, _ := rt.ImportStore().Has(ctx, d)
		if !has || !rt.LeaseHolds(res.Lease, d) || !slices.Contains(st.Blobs, d) {
			t.Errorf("signature blob %s: in the store %v, held by the lease %v, listed in the state's blobs %v", d, has, rt.LeaseHolds(res.Lease, d), slices.Contains(st.Blobs, d))
		}
	}
}

// TestImportAgainWhenSignatureBlobsUnlisted: a source whose state lists its
// signature manifests but not their blobs (kept before holdfast kept every
// blob of them: the config was not written) is imported again, and the
// import writes what was missing.
func TestImportAgainWhenSignatureBlobsUnlisted(t *testing.T) {
	ctx := context.Background()
	rt := fake.New()
	img := image(t, "example.com/signed/old:1", 12)
	req := runtime.ImportRequest{Source: "/images/old.tar", Identity: "id-1", Open: signedHaul(t, img)}
	res, err := importer.Import(ctx, rt.ImportStore(), req)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := rt.State(res.Lease)
	sigBlobs := signatureBlobs(t, rt, st)
	// As an older holdfast left it: the state lists the image's blobs only,
	// and the signature configs were never written.
	old := st
	old.Blobs = slices.DeleteFunc(slices.Clone(st.Blobs), func(d digest.Digest) bool { return slices.Contains(sigBlobs, d) })
	rt.PutState(old)
	var configs []digest.Digest
	for _, sigs := range st.Signatures {
		for _, d := range sigs {
			raw, _ := rt.ImportStore().ReadBlob(ctx, d)
			var m ocispec.Manifest
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			configs = append(configs, m.Config.Digest)
		}
	}
	for _, d := range configs {
		rt.DeleteBlob(d)
	}
	again, err := importer.Import(ctx, rt.ImportStore(), req)
	if err != nil {
		t.Fatal(err)
	}
	if again.Unchanged {
		t.Fatal("the source was found unchanged; its signatures' configs are not in the store")
	}
	for _, d := range configs {
		if has, _ := rt.ImportStore().Has(ctx, d); !has || !rt.LeaseHolds(again.Lease, d) {
			t.Errorf("signature config %s: in the store %v, held by the lease %v", d, has, rt.LeaseHolds(again.Lease, d))
		}
	}
}

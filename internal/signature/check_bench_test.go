package signature

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"maps"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/archive"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/signature/layout"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
)

// signedArchive is what the walk of an OCI archive gives of n images, each
// signed by k: its .sig manifest skipped under its
// <repo>:sha256-<hex>.sig name, its documents kept.
func signedArchive(tb testing.TB, k *ecdsa.PrivateKey, n int) *archive.Result {
	tb.Helper()
	res := &archive.Result{Docs: map[digest.Digest][]byte{}}
	for i := range n {
		r := fmt.Sprintf("%s%d", repo, i)
		img := image(r+":1", r)
		sig := sigtest.Legacy(tb, r, img.Target.Digest, k)
		maps.Copy(res.Docs, sig.Blobs)
		res.Images = append(res.Images, img)
		res.Skipped = append(res.Skipped, archive.Skipped{MediaType: sig.Descriptor.MediaType, Digest: sig.Descriptor.Digest,
			Size: sig.Descriptor.Size, Name: r + ":" + oci.SignatureTag(img.Target.Digest), Reason: "signature"})
	}
	return res
}

// TestCheckReadsOnce: judging an archive's images reads each signature
// manifest and payload once, whatever the number of images.
func TestCheckReadsOnce(t *testing.T) {
	k := sigtest.NewKey(t)
	pol := loadPolicy(t, sigtest.PublicPEM(t, k), "  - images: [\"registry.example/team/*\"]\n    keys: [cosign.pub]\n")
	const n = 5
	res := signedArchive(t, k, n)
	store := &memStore{blobs: res.Docs}
	for _, img := range Check(context.Background(), pol, res, store) {
		if img.State != Verified {
			t.Errorf("%s: %s, want verified", img.Name, img.Verdict)
		}
	}
	// A manifest and its payload per image.
	if store.reads != 2*n {
		t.Errorf("%d blobs read for %d images, want %d", store.reads, n, 2*n)
	}
}

// BenchmarkCheck judges archives of n images, each with a key signature:
// finding the signatures, verifying each (ECDSA P-256).
func BenchmarkCheck(b *testing.B) {
	k := sigtest.NewKey(b)
	pol := loadPolicy(b, sigtest.PublicPEM(b, k), "  - images: [\"registry.example/team/*\"]\n    keys: [cosign.pub]\n")
	for _, n := range []int{1000, 2000, 20000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			res := signedArchive(b, k, n)
			for b.Loop() {
				for _, img := range Check(context.Background(), pol, res, layout.Docs(res)) {
					if img.State != Verified {
						b.Fatalf("%s: %s", img.Name, img.Verdict)
					}
				}
			}
		})
	}
}

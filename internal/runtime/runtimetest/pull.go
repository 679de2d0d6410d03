package runtimetest

import (
	"context"
	"io"
	"log"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/signature/layout"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
)

// registryKinds are the two kinds of registry a pull meets: one with the
// OCI 1.1 referrers API, and one without it, which lists an image's
// referrers under the fallback tag <repo>:sha256-<hex> (go-containerregistry's
// client writes that tag when the registry has no API).
var registryKinds = []struct {
	name      string
	referrers bool
}{{"ReferrersAPI", true}, {"FallbackTag", false}}

// signedRegistry is a registry on 127.0.0.1 holding one image, repo:1,
// and what the case pushed beside it.
type signedRegistry struct {
	repo  string
	image ocispec.Descriptor
	blobs sigtest.Blobs
}

func newSignedRegistry(t *testing.T, referrers bool) *signedRegistry {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.WithReferrersSupport(referrers), registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	r := &signedRegistry{repo: strings.TrimPrefix(srv.URL, "http://") + "/conformance/app", blobs: sigtest.Blobs{}}
	r.image = r.blobs.Image(t, "pulled")
	r.push(t, r.repo+":1", r.image)
	return r
}

// push uploads the manifest desc, and the blobs it names, to ref.
func (r *signedRegistry) push(t *testing.T, ref string, desc ocispec.Descriptor) {
	t.Helper()
	if err := r.blobs.Push(ref, desc); err != nil {
		t.Fatal(err)
	}
}

// bundleReferrer pushes a referrer of the image holding a bundle signed
// with a new key, as cosign v3 sign --key pushes it, and returns it.
func (r *signedRegistry) bundleReferrer(t *testing.T) ocispec.Descriptor {
	t.Helper()
	d := r.blobs.Referrer(t, r.image, sigtest.KeyBundle(t, sigtest.NewKey(t), sigtest.Statement(t, r.image.Digest)))
	r.push(t, r.repo+"@"+d.Digest.String(), d)
	return d
}

// pull pulls repo:1 under a lease of its own, released when t ends.
func (r *signedRegistry) pull(t *testing.T, rt runtime.Runtime) runtime.Want {
	t.Helper()
	ctx := context.Background()
	lease, err := rt.TempLease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Release(context.WithoutCancel(ctx), lease) })
	w, err := rt.Pull(ctx, r.repo+":1", runtime.PullOptions{Lease: lease, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatalf("pull of %s:1: %v", r.repo, err)
	}
	if w.Target.Digest != r.image.Digest {
		t.Fatalf("pull of %s:1 gave %s, want %s", r.repo, w.Target.Digest, r.image.Digest)
	}
	return w
}

// requireFetched fails t unless the store holds every blob of each
// signature manifest sigs names (as the registry holds them), and the
// signature finder finds in the store a signature of the image of kind
// for each manifest of sigs.
func requireFetched(t *testing.T, s Store, r *signedRegistry, sigs []ocispec.Descriptor, kinds ...string) {
	t.Helper()
	ctx := context.Background()
	store := s.Runtime.ImportStore()
	for _, d := range sigs {
		children, err := oci.Children(d, r.blobs[d.Digest])
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range append([]ocispec.Descriptor{d}, children...) {
			if ok, err := store.Has(ctx, b.Digest); !ok || err != nil {
				t.Errorf("the store lacks %s %s of signature %s (%v)", oci.Kind(b.MediaType), b.Digest, d.Digest, err)
			}
		}
	}
	found, errs := layout.NewFinder(ctx, sigs, store).Find(r.image)
	var got []string
	for _, f := range found {
		got = append(got, f.Kind+" "+f.Manifest.Digest.String())
	}
	var want []string
	for i, d := range sigs {
		want = append(want, kinds[i]+" "+d.Digest.String())
	}
	if !slices.Equal(got, want) || len(errs) > 0 {
		t.Errorf("signatures found in the store: %v (errors %v), want %v", got, errs, want)
	}
}

func digests(ds []ocispec.Descriptor) []digest.Digest {
	var out []digest.Digest
	for _, d := range ds {
		out = append(out, d.Digest)
	}
	return out
}

// pullFetchesReferrers: a pull of an image with a key-signed bundle
// referrer, from a registry with the referrers API and from one without it,
// returns the referrer among the image's signatures and fetches it whole
// into the store; an attestation referrer of the image beside it (another
// predicate type) is no signature and is left out.
func pullFetchesReferrers(t *testing.T, s Store, _ string) {
	needPulls(t, s)
	for _, kind := range registryKinds {
		t.Run(kind.name, func(t *testing.T) {
			r := newSignedRegistry(t, kind.referrers)
			ref := r.bundleReferrer(t)
			att := r.blobs.Attestation(t, r.image, sigtest.KeyBundle(t, sigtest.NewKey(t), sigtest.StatementOf(t, r.image.Digest, "https://slsa.dev/provenance/v1")), "https://slsa.dev/provenance/v1")
			r.push(t, r.repo+"@"+att.Digest.String(), att)
			w := r.pull(t, s.Runtime)
			if got := digests(w.Signatures); !slices.Equal(got, []digest.Digest{ref.Digest}) {
				t.Fatalf("signatures of the pull: %v, want the referrer %s alone (not the attestation %s)", got, ref.Digest, att.Digest)
			}
			requireFetched(t, s, r, w.Signatures, layout.KindBundle)
		})
	}
}

// pullFetchesLegacyAndReferrers: an image with both cosign's legacy .sig
// manifest and a bundle referrer gets both, the legacy one named by its tag.
func pullFetchesLegacyAndReferrers(t *testing.T, s Store, _ string) {
	needPulls(t, s)
	for _, kind := range registryKinds {
		t.Run(kind.name, func(t *testing.T) {
			r := newSignedRegistry(t, kind.referrers)
			legacy := sigtest.Legacy(t, r.repo, r.image.Digest, sigtest.NewKey(t))
			maps.Copy(r.blobs, legacy.Blobs)
			sigTag := r.repo + ":" + oci.SignatureTag(r.image.Digest)
			r.push(t, sigTag, legacy.Descriptor)
			ref := r.bundleReferrer(t)
			w := r.pull(t, s.Runtime)
			if got := digests(w.Signatures); !slices.Equal(got, []digest.Digest{legacy.Descriptor.Digest, ref.Digest}) {
				t.Fatalf("signatures of the pull: %v, want the .sig manifest %s and the referrer %s", got, legacy.Descriptor.Digest, ref.Digest)
			}
			if n := w.Signatures[0].Annotations[oci.AnnotationRefName]; n != sigTag {
				t.Errorf("the .sig manifest is named %q, want %q", n, sigTag)
			}
			requireFetched(t, s, r, w.Signatures, layout.KindSimpleSigning, layout.KindBundle)
		})
	}
}

// pullWithoutSignatures: an image with no signature at all, from either
// kind of registry, is pulled with none and no error.
func pullWithoutSignatures(t *testing.T, s Store, _ string) {
	needPulls(t, s)
	for _, kind := range registryKinds {
		t.Run(kind.name, func(t *testing.T) {
			r := newSignedRegistry(t, kind.referrers)
			if w := r.pull(t, s.Runtime); len(w.Signatures) != 0 {
				t.Errorf("signatures of an unsigned image: %v", digests(w.Signatures))
			}
		})
	}
}

func needPulls(t *testing.T, s Store) {
	t.Helper()
	if !s.Can.Pulls {
		t.Skip("the backend pulls from no registry (Capabilities.Pulls): its pulls are a test's PullFunc")
	}
}

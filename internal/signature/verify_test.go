package signature

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/signature/layout"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
)

func check(t *testing.T, got Verdict, state State, by, reason string) {
	t.Helper()
	if got.State != state || got.By != by || !strings.Contains(got.Reason, reason) {
		t.Fatalf("got %+v, want state %s, by %q, reason containing %q", got, state, by, reason)
	}
	t.Logf("%s %q %s", got.State, got.By, got.Reason)
}

func verifyFound(t *testing.T, b sigtest.Blobs, image ocispec.Descriptor, rule *Rule, candidates ...ocispec.Descriptor) Verdict {
	t.Helper()
	return Verify(context.Background(), image, find(t, b, image, candidates...), rule)
}

// find is what layout finds of image's signatures among candidates.
func find(t *testing.T, b sigtest.Blobs, image ocispec.Descriptor, candidates ...ocispec.Descriptor) []layout.Signature {
	t.Helper()
	sigs, errs := layout.NewIndex(context.Background(), candidates, b).Find(image)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return sigs
}

// keyRule is a rule that trusts these keys.
func keyRule(keys ...Key) *Rule { return &Rule{Keys: keys} }

// keylessRule is a rule that trusts this sigstore root and these
// identities.
func keylessRule(root []byte, ids ...Identity) *Rule {
	return &Rule{Keyless: &Keyless{TrustedRootJSON: root, Identities: ids}}
}

// tagged names a candidate as Zarf does the .sig records it carries.
func tagged(d ocispec.Descriptor, image digest.Digest) ocispec.Descriptor {
	d.Annotations = map[string]string{ocispec.AnnotationRefName: repo + ":" + oci.SignatureTag(image)}
	return d
}

func TestKeySigned(t *testing.T) {
	b := sigtest.Blobs{}
	img := b.Image(t, "1.0")
	k := sigtest.NewKey(t)
	sig := b.Legacy(t, img.Digest, k)
	trust := keyRule(Key{Path: "release", Public: &k.PublicKey})

	t.Run("the right key", func(t *testing.T) {
		check(t, verifyFound(t, b, img, trust, sig), Verified, "release", "")
	})
	t.Run("the right key among others", func(t *testing.T) {
		other := sigtest.NewKey(t)
		trust := keyRule(Key{Path: "other", Public: &other.PublicKey}, trust.Keys[0])
		check(t, verifyFound(t, b, img, trust, sig), Verified, "release", "")
	})
	t.Run("another key", func(t *testing.T) {
		other := sigtest.NewKey(t)
		got := verifyFound(t, b, img, keyRule(Key{Path: "other", Public: &other.PublicKey}), sig)
		check(t, got, Invalid, "", "no trusted key verifies it")
	})
	t.Run("no key", func(t *testing.T) {
		check(t, verifyFound(t, b, img, &Rule{}, sig), Invalid, "", "no key is trusted")
	})
	t.Run("a bad signature beside a good one", func(t *testing.T) {
		other := sigtest.NewKey(t)
		check(t, verifyFound(t, b, img, trust, b.Legacy(t, img.Digest, other), sig), Verified, "release", "")
	})
}

func TestKeySignedAnotherImage(t *testing.T) {
	b := sigtest.Blobs{}
	img, other := b.Image(t, "1.0"), b.Image(t, "2.0")
	k := sigtest.NewKey(t)
	trust := keyRule(Key{Path: "release", Public: &k.PublicKey})
	sigOfOther := b.Legacy(t, other.Digest, k)

	// Found by its payload, it is the other image's, not this one's.
	if sigs := find(t, b, img, sigOfOther); len(sigs) != 0 {
		t.Fatalf("found %d signatures of another image", len(sigs))
	}
	check(t, verifyFound(t, b, other, trust, sigOfOther), Verified, "release", "")

	// Recorded under this image's .sig tag, it is judged, and refused: a
	// genuine signature, for another image.
	got := verifyFound(t, b, img, trust, tagged(sigOfOther, img.Digest))
	check(t, got, Invalid, "", "signed by release, but for image "+other.Digest.String())
	got = verifyFound(t, b, img, trust, sigOfOther, tagged(sigOfOther, img.Digest))
	check(t, got, Invalid, "", "signed by release, but for image "+other.Digest.String())

	// Beside a signature by another key, it is the more telling failure.
	stranger := b.Legacy(t, img.Digest, sigtest.NewKey(t))
	got = verifyFound(t, b, img, trust, stranger, tagged(sigOfOther, img.Digest))
	check(t, got, Invalid, "", "none of 2 signatures verifies; ")
	check(t, got, Invalid, "", "but for image "+other.Digest.String())

	// Given to Verify directly, the same.
	got = Verify(context.Background(), img, find(t, b, other, sigOfOther), trust)
	check(t, got, Invalid, "", "for image "+other.Digest.String())
}

func TestKeySignedTampered(t *testing.T) {
	b := sigtest.Blobs{}
	img, other := b.Image(t, "1.0"), b.Image(t, "2.0")
	k := sigtest.NewKey(t)
	trust := keyRule(Key{Path: "release", Public: &k.PublicKey})

	// The signature of the other image's payload, moved onto a payload
	// naming this image: the layer digest follows the payload, the
	// signature does not.
	signed := sigtest.Payload(t, repo, other.Digest)
	sig := sigtest.Sign(t, k, signed)
	forged := []byte(strings.Replace(string(signed), other.Digest.Encoded(), img.Digest.Encoded(), 1))
	m := b.Manifest(t, b.SigLayer(forged, map[string]string{oci.AnnotationCosignSignature: sig}))
	check(t, verifyFound(t, b, img, trust, m), Invalid, "", "no trusted key verifies it")

	// A payload changed in the store under the layer's digest is refused
	// by NewIndex.
	good := b.Legacy(t, img.Digest, k)
	sigs := find(t, b, img, good)
	b[sigs[0].Layer.Digest] = signed
	if sigs, errs := layout.NewIndex(context.Background(), []ocispec.Descriptor{good}, b).Find(img); len(errs) == 0 || len(sigs) != 0 {
		t.Fatalf("found %d signatures and no error: took a layer whose content does not match its digest", len(sigs))
	}
}

func TestUnsigned(t *testing.T) {
	b := sigtest.Blobs{}
	img := b.Image(t, "1.0")
	k := sigtest.NewKey(t)
	trust := keyRule(Key{Path: "release", Public: &k.PublicKey})

	check(t, verifyFound(t, b, img, trust), Unsigned, "", "no signature")

	// What is not a signature is ignored: an image, a legacy attestation
	// under the image's tag, a chart, an index, a bundle of an SBOM.
	att := b.Manifest(t, b.Put("application/vnd.dsse.envelope.v1+json", []byte(`{"payloadType":"application/vnd.in-toto+json","payload":"","signatures":[]}`)))
	chart := b.Manifest(t, b.Put("application/vnd.cncf.helm.chart.content.v1.tar+gzip", []byte("chart")))
	index := b.PutJSON(t, ocispec.MediaTypeImageIndex, ocispec.Index{MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{img}})
	sbom := b.Attestation(t, img, []byte(`{}`), "https://spdx.dev/Document")
	others := []ocispec.Descriptor{img, tagged(att, img.Digest), chart, index, sbom}
	check(t, verifyFound(t, b, img, trust, others...), Unsigned, "", "no signature")

	// Beside a signature, they change nothing.
	sig := b.Legacy(t, img.Digest, k)
	if sigs := find(t, b, img, append(others, sig, sig)...); len(sigs) != 1 {
		t.Fatalf("found %d signatures, want 1", len(sigs))
	}
	check(t, verifyFound(t, b, img, trust, append(others, sig)...), Verified, "release", "")
}

// cosign sign --registry-referrers-mode=oci-1-1 pushes the legacy
// signature manifest as a referrer of the image.
func TestLegacyReferrer(t *testing.T) {
	b := sigtest.Blobs{}
	img, other := b.Image(t, "1.0"), b.Image(t, "2.0")
	k := sigtest.NewKey(t)
	trust := keyRule(Key{Path: "release", Public: &k.PublicKey})
	asReferrer := func(sig, subject ocispec.Descriptor) ocispec.Descriptor {
		var m ocispec.Manifest
		if err := json.Unmarshal(b[sig.Digest], &m); err != nil {
			t.Fatal(err)
		}
		m.ArtifactType = "application/vnd.dev.cosign.artifact.sig.v1+json"
		m.Subject = &ocispec.Descriptor{MediaType: subject.MediaType, Digest: subject.Digest, Size: subject.Size}
		return b.PutJSON(t, ocispec.MediaTypeImageManifest, m)
	}

	check(t, verifyFound(t, b, img, trust, asReferrer(b.Legacy(t, img.Digest, k), img)), Verified, "release", "")
	// Its subject claims the image, whatever the payload says.
	got := verifyFound(t, b, img, trust, asReferrer(b.Legacy(t, other.Digest, k), img))
	check(t, got, Invalid, "", "but for image "+other.Digest.String())
	// A referrer of another image is that image's.
	check(t, verifyFound(t, b, img, trust, asReferrer(b.Legacy(t, img.Digest, k), other)), Unsigned, "", "no signature")
}

func TestKeySignedBundle(t *testing.T) {
	b := sigtest.Blobs{}
	img := b.Image(t, "1.0")
	k := sigtest.NewKey(t)
	trust := keyRule(Key{Path: "release", Public: &k.PublicKey})

	ref := b.Referrer(t, img, sigtest.KeyBundle(t, k, sigtest.Statement(t, img.Digest)))
	check(t, verifyFound(t, b, img, trust, ref), Verified, "release", "")

	other := sigtest.NewKey(t)
	got := verifyFound(t, b, img, keyRule(Key{Path: "other", Public: &other.PublicKey}), ref)
	check(t, got, Invalid, "", "no trusted key verifies it")

	// An attestation that does not say it is one is no signature either.
	att := b.Attestation(t, img, sigtest.KeyBundle(t, k, sigtest.StatementOf(t, img.Digest, "https://slsa.dev/provenance/v1")), "")
	check(t, verifyFound(t, b, img, trust, att), Invalid, "", "attestation, not a signature")
}

func TestKeyless(t *testing.T) {
	vs := sigtest.NewVirtualSigstore(t)
	b := sigtest.Blobs{}
	img := b.Image(t, "1.0")
	p := sigtest.Payload(t, repo, img.Digest)
	sig := b.LegacyKeyless(t, vs, p, sigtest.Signer, true)
	root, me := sigtest.TrustedRoot(t, vs, true, false), Identity{Issuer: sigtest.Issuer, Subject: sigtest.Signer}
	trust := keylessRule(root, me)
	by := sigtest.Issuer + " " + sigtest.Signer

	t.Run("the right identity", func(t *testing.T) {
		check(t, verifyFound(t, b, img, trust, sig), Verified, by, "")
	})
	t.Run("an identity by regular expression", func(t *testing.T) {
		trust := keylessRule(root, Identity{Issuer: "nobody", Subject: sigtest.Signer}, Identity{IssuerRegExp: `^https://issuer\.example$`, SubjectRegExp: `@example\.com$`})
		check(t, verifyFound(t, b, img, trust, sig), Verified, by, "")
	})
	t.Run("another identity", func(t *testing.T) {
		trust := keylessRule(root, Identity{Issuer: sigtest.Issuer, Subject: "someone@example.com"})
		check(t, verifyFound(t, b, img, trust, sig), Invalid, "", "signed by "+by+", which is no trusted identity")
	})
	t.Run("another issuer", func(t *testing.T) {
		trust := keylessRule(root, Identity{Issuer: "https://other.example", Subject: sigtest.Signer})
		check(t, verifyFound(t, b, img, trust, sig), Invalid, "", "which is no trusted identity")
	})
	t.Run("another sigstore", func(t *testing.T) {
		trust := keylessRule(sigtest.TrustedRoot(t, sigtest.NewVirtualSigstore(t), true, false), me)
		check(t, verifyFound(t, b, img, trust, sig), Invalid, "", "not enough verified log entries")
	})
	t.Run("no trusted root", func(t *testing.T) {
		check(t, verifyFound(t, b, img, keylessRule(nil, me), sig), Invalid, "", "no trusted root")
	})
	t.Run("no identity", func(t *testing.T) {
		check(t, verifyFound(t, b, img, keylessRule(root), sig), Invalid, "", "no identity is trusted")
	})
	t.Run("a root with a timestamp authority and no Rekor log", func(t *testing.T) {
		trust := keylessRule(sigtest.TrustedRoot(t, vs, false, false), me)
		check(t, verifyFound(t, b, img, trust, sig), Verified, by, "")
	})
	t.Run("no Rekor entry nor timestamp", func(t *testing.T) {
		bare := b.LegacyKeyless(t, vs, p, sigtest.Signer, false)
		// A root with a Rekor log wants an entry in it.
		check(t, verifyFound(t, b, img, trust, bare), Invalid, "", "not enough verified log entries")
		// One without wants a time at which the certificate was valid:
		// holdfast does not take the current time.
		trust := keylessRule(sigtest.TrustedRoot(t, vs, false, false), me)
		check(t, verifyFound(t, b, img, trust, bare), Invalid, "", "threshold not met for verified signed & log entry integrated timestamps")
	})
	t.Run("a root with CT logs and a certificate without SCT", func(t *testing.T) {
		trust := keylessRule(sigtest.TrustedRoot(t, vs, true, true), me)
		check(t, verifyFound(t, b, img, trust, sig), Invalid, "", "certificate timestamp")
	})
	t.Run("another image", func(t *testing.T) {
		other := b.Image(t, "2.0")
		sigOfOther := b.LegacyKeyless(t, vs, sigtest.Payload(t, repo, other.Digest), sigtest.Signer, true)
		check(t, verifyFound(t, b, img, trust, tagged(sigOfOther, img.Digest)), Invalid, "", "but for image "+other.Digest.String())
	})
}

func TestKeylessBundle(t *testing.T) {
	vs := sigtest.NewVirtualSigstore(t)
	b := sigtest.Blobs{}
	img, other := b.Image(t, "1.0"), b.Image(t, "2.0")
	root, me := sigtest.TrustedRoot(t, vs, true, false), Identity{Issuer: sigtest.Issuer, Subject: sigtest.Signer}
	trust := keylessRule(root, me)
	by := sigtest.Issuer + " " + sigtest.Signer

	ref := b.Referrer(t, img, sigtest.KeylessBundle(t, vs, sigtest.Statement(t, img.Digest), sigtest.Signer))
	check(t, verifyFound(t, b, img, trust, ref), Verified, by, "")

	wrong := keylessRule(root, Identity{Issuer: sigtest.Issuer, Subject: "someone@example.com"})
	check(t, verifyFound(t, b, img, wrong, ref), Invalid, "", "which is no trusted identity")

	// A referrer of another image is that image's: ignored here.
	refOfOther := b.Referrer(t, other, sigtest.KeylessBundle(t, vs, sigtest.Statement(t, other.Digest), sigtest.Signer))
	check(t, verifyFound(t, b, img, trust, refOfOther), Unsigned, "", "no signature")
	check(t, verifyFound(t, b, other, trust, refOfOther), Verified, by, "")

	// A referrer pointed at this image whose signed statement is about
	// another: invalid.
	moved := b.Referrer(t, img, sigtest.KeylessBundle(t, vs, sigtest.Statement(t, other.Digest), sigtest.Signer))
	check(t, verifyFound(t, b, img, trust, moved), Invalid, "", "but for image "+other.Digest.String())
}

func TestMalformed(t *testing.T) {
	b := sigtest.Blobs{}
	img := b.Image(t, "1.0")
	k := sigtest.NewKey(t)
	trust := keyRule(Key{Path: "release", Public: &k.PublicKey})
	p := sigtest.Payload(t, repo, img.Digest)

	for name, ann := range map[string]map[string]string{
		"no signature":         {},
		"signature not base64": {oci.AnnotationCosignSignature: "%%%"},
		"certificate not PEM":  {oci.AnnotationCosignSignature: sigtest.Sign(t, k, p), oci.AnnotationCosignCertificate: "junk"},
		"Rekor bundle junk":    {oci.AnnotationCosignSignature: sigtest.Sign(t, k, p), oci.AnnotationCosignRekorBundle: "{"},
	} {
		t.Run(name, func(t *testing.T) {
			m := b.Manifest(t, b.SigLayer(p, ann))
			check(t, verifyFound(t, b, img, trust, m), Invalid, "", "simplesigning signature")
		})
	}
	t.Run("bundle junk", func(t *testing.T) {
		ref := b.Referrer(t, img, []byte(`{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json"}`))
		check(t, verifyFound(t, b, img, trust, ref), Invalid, "", "bundle")
	})
}

// TestVerifyBlob: a key-signed sigstore bundle over a file (Zarf's
// zarf.bundle.sig over zarf.yaml) verifies with its key over the same
// bytes, and not with another key, over other bytes, or when it is no
// bundle.
func TestVerifyBlob(t *testing.T) {
	k := sigtest.NewKey(t)
	blob := []byte("kind: ZarfPackageConfig\nmetadata:\n  name: demo\n")
	bundleJSON := sigtest.BlobBundle(t, k, blob)
	trust := keyRule(Key{Path: "release", Public: &k.PublicKey})
	ctx := context.Background()
	check(t, VerifyBlob(ctx, bundleJSON, blob, trust), Verified, "release", "")
	other := sigtest.NewKey(t)
	check(t, VerifyBlob(ctx, bundleJSON, blob, keyRule(Key{Path: "other", Public: &other.PublicKey})), Invalid, "", "no trusted key verifies it")
	check(t, VerifyBlob(ctx, bundleJSON, append([]byte("# edited\n"), blob...), trust), Invalid, "", "no trusted key verifies it")
	check(t, VerifyBlob(ctx, []byte("{}"), blob, trust), Invalid, "", "bundle")
}

package signature

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/signature/layout"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// legacySeeds are the annotations of real legacy layers: signed with a
// key, and keyless with a certificate, a Rekor bundle and a timestamp.
func legacySeeds(f *testing.F) map[string][]any {
	k := sigtest.NewKey(f)
	img := digest.FromString("image")
	p := sigtest.Payload(f, sigtest.Repo, img)
	keyless := sigtest.KeylessAnnotations(f, sigtest.NewVirtualSigstore(f), p, sigtest.Issuer, sigtest.Signer, true)
	return map[string][]any{
		"key":     {p, sigtest.Sign(f, k, p), "", "", ""},
		"keyless": {p, keyless[oci.AnnotationCosignSignature], keyless[oci.AnnotationCosignCertificate], keyless[oci.AnnotationCosignRekorBundle], keyless[oci.AnnotationCosignTimestamp]},
		"junk":    {[]byte("{}"), "%%%", "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n", `{"SignedEntryTimestamp":"AA==","Payload":{"body":"e30=","logID":"zz"}}`, `{"SignedRFC3161Timestamp":"AA=="}`},
	}
}

// FuzzLegacyBundle: whatever a legacy simple-signing layer's annotations
// hold, making its bundle and verifying it never panics, and never
// verifies it under a key that did not sign it.
func FuzzLegacyBundle(f *testing.F) {
	testenv.Seeds(f, legacySeeds(f))
	rule := keyRule(Key{Path: "other", Public: &sigtest.NewKey(f).PublicKey})
	f.Fuzz(func(t *testing.T, payload []byte, sig, cert, rekor, ts string) {
		ann := map[string]string{oci.AnnotationCosignSignature: sig}
		for k, v := range map[string]string{oci.AnnotationCosignCertificate: cert, oci.AnnotationCosignRekorBundle: rekor, oci.AnnotationCosignTimestamp: ts} {
			if v != "" {
				ann[k] = v
			}
		}
		layer := ocispec.Descriptor{MediaType: oci.MediaTypeSimpleSigning, Digest: digest.FromBytes(payload), Size: int64(len(payload)), Annotations: ann}
		if b, err := legacyBundle(layer); err == nil && b == nil {
			t.Fatal("no bundle and no error")
		}
		s := layout.Signature{Kind: layout.KindSimpleSigning, Layer: layer, Content: payload}
		if v := Verify(context.Background(), ocispec.Descriptor{Digest: digest.FromString("image")}, []layout.Signature{s}, rule); v.State != Invalid {
			t.Fatalf("verdict %s under a key that signed nothing", v)
		}
	})
}

// FuzzTlogEntry: whatever cosign's Rekor bundle annotation holds, reading
// it never panics; an entry read has its SET, and the kind and version its
// body says.
func FuzzTlogEntry(f *testing.F) {
	seeds := map[string][]any{}
	for name, s := range legacySeeds(f) {
		seeds[name] = []any{s[3]}
	}
	testenv.Seeds(f, seeds)
	f.Fuzz(func(t *testing.T, annotation string) {
		e, err := tlogEntry(annotation)
		if err != nil {
			return
		}
		if len(e.GetInclusionPromise().GetSignedEntryTimestamp()) == 0 {
			t.Fatal("an entry without its SET")
		}
		var kv struct {
			Kind       string `json:"kind"`
			APIVersion string `json:"apiVersion"`
		}
		if err := json.Unmarshal(e.GetCanonicalizedBody(), &kv); err != nil {
			t.Fatalf("an entry whose body is no JSON: %v", err)
		}
		if kv.Kind != e.GetKindVersion().GetKind() || kv.APIVersion != e.GetKindVersion().GetVersion() {
			t.Fatalf("kind %q/%q, the body says %q/%q", e.GetKindVersion().GetKind(), e.GetKindVersion().GetVersion(), kv.Kind, kv.APIVersion)
		}
	})
}

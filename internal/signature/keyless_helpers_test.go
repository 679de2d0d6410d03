package signature

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protodsse "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"
	sigsig "github.com/sigstore/sigstore/pkg/signature"
	sigdsse "github.com/sigstore/sigstore/pkg/signature/dsse"
)

// The signer of the keyless tests, as the virtual Fulcio certifies it.
const (
	signer = "release@example.com"
	issuer = "https://issuer.example"
)

// legacyKeyless stores the .sig manifest cosign sign pushes for a keyless
// signature of payload p by the virtual sigstore: the certificate and chain,
// and, when times, the Rekor bundle and the RFC 3161 timestamp.
func (b blobs) legacyKeyless(t *testing.T, vs *ca.VirtualSigstore, p []byte, subject string, times bool) ocispec.Descriptor {
	t.Helper()
	return b.manifest(t, b.sigLayer(p, sigtest.KeylessAnnotations(t, vs, p, issuer, subject, times)))
}

// statement is the in-toto statement cosign v3 sign signs for an image.
func statement(t *testing.T, image digest.Digest) []byte {
	t.Helper()
	return statementOf(t, image, predicateSign)
}

// statementOf is an in-toto statement of this predicate type.
func statementOf(t *testing.T, image digest.Digest, predicateType string) []byte {
	t.Helper()
	raw, err := json.Marshal(map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       []any{map[string]any{"name": repo, "digest": map[string]string{image.Algorithm().String(): image.Encoded()}}},
		"predicateType": predicateType,
		"predicate":     map[string]any{},
	})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// newBundle is the JSON of a v0.3 bundle of a DSSE envelope.
func newBundle(t *testing.T, vm *protobundle.VerificationMaterial, env *dsse.Envelope) []byte {
	t.Helper()
	p, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	if err != nil {
		t.Fatal(err)
	}
	mediaType, err := bundle.MediaTypeString("0.3")
	if err != nil {
		t.Fatal(err)
	}
	b, err := bundle.NewBundle(&protobundle.Bundle{
		MediaType:            mediaType,
		VerificationMaterial: vm,
		Content: &protobundle.Bundle_DsseEnvelope{DsseEnvelope: &protodsse.Envelope{
			Payload:     p,
			PayloadType: env.PayloadType,
			Signatures:  []*protodsse.Signature{{Sig: sig, Keyid: env.Signatures[0].KeyID}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// keylessBundle is a bundle of the virtual sigstore attesting stmt: the
// certificate, the Rekor entry with its inclusion proof and SET, and an
// RFC 3161 timestamp.
func keylessBundle(t *testing.T, vs *ca.VirtualSigstore, stmt []byte, subject string) []byte {
	t.Helper()
	ent, err := vs.AttestAtTime(subject, issuer, stmt, time.Now().Add(5*time.Minute), true)
	if err != nil {
		t.Fatal(err)
	}
	vc, _ := ent.VerificationContent()
	sc, _ := ent.SignatureContent()
	entries, _ := ent.TlogEntries()
	tle, _ := sigtest.WithSET(t, vs, entries[0])
	ts, _ := ent.Timestamps()
	return newBundle(t, &protobundle.VerificationMaterial{
		Content:     &protobundle.VerificationMaterial_Certificate{Certificate: &protocommon.X509Certificate{RawBytes: vc.Certificate().Raw}},
		TlogEntries: []*protorekor.TransparencyLogEntry{tle},
		TimestampVerificationData: &protobundle.TimestampVerificationData{
			Rfc3161Timestamps: []*protocommon.RFC3161SignedTimestamp{{SignedTimestamp: ts[0]}},
		},
	}, sc.EnvelopeContent().RawEnvelope())
}

// keyBundle is a bundle of stmt signed with k and nothing else, as cosign
// sign --key --tlog-upload=false makes.
func keyBundle(t *testing.T, k *ecdsa.PrivateKey, stmt []byte) []byte {
	t.Helper()
	s, err := sigsig.LoadECDSASigner(k, crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	es, err := dsse.NewEnvelopeSigner(&sigdsse.SignerAdapter{SignatureSigner: s, Pub: &k.PublicKey})
	if err != nil {
		t.Fatal(err)
	}
	env, err := es.SignPayload(context.Background(), "application/vnd.in-toto+json", stmt)
	if err != nil {
		t.Fatal(err)
	}
	return newBundle(t, &protobundle.VerificationMaterial{
		Content: &protobundle.VerificationMaterial_PublicKey{PublicKey: &protocommon.PublicKeyIdentifier{Hint: "release"}},
	}, env)
}

// referrer stores the OCI 1.1 referrer cosign v3 sign pushes for a bundle.
func (b blobs) referrer(t *testing.T, subject ocispec.Descriptor, bundleJSON []byte) ocispec.Descriptor {
	t.Helper()
	return b.attestation(t, subject, bundleJSON, predicateSign)
}

// attestation stores the referrer cosign v3 pushes for a bundle of a
// statement of this predicate type; "" leaves the type unsaid.
func (b blobs) attestation(t *testing.T, subject ocispec.Descriptor, bundleJSON []byte, predicateType string) ocispec.Descriptor {
	t.Helper()
	subject.Annotations = nil
	ann := map[string]string{"dev.sigstore.bundle.content": "dsse-envelope"}
	if predicateType != "" {
		ann[annotationPredicateType] = predicateType
	}
	return b.putJSON(t, ocispec.MediaTypeImageManifest, ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: MediaTypeBundle,
		Config:       b.put(ocispec.MediaTypeEmptyJSON, []byte("{}")),
		Layers:       []ocispec.Descriptor{b.put(MediaTypeBundle, bundleJSON)},
		Subject:      &subject,
		Annotations:  ann,
	})
}

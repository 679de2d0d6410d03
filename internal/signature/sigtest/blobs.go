package sigtest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"encoding/base64"
	"maps"
	"testing"
	"time"

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

	"github.com/holdfast-project/holdfast/internal/oci"
)

// More of what cosign writes.
const (
	MediaTypeBundle         = "application/vnd.dev.sigstore.bundle.v0.3+json"
	AnnotationPredicateType = "dev.sigstore.bundle.predicateType"
	PredicateSign           = "https://sigstore.dev/cosign/sign/v1"
)

// The repository the test images are said to come from, and the signer of
// keyless signatures as the virtual Fulcio certifies it.
const (
	Repo   = "registry.example/team/app"
	Signer = "release@example.com"
	Issuer = "https://issuer.example"
)

// Blobs is a content store in memory, which reads as an import's stores do
// (oci.Reader).
type Blobs map[digest.Digest][]byte

// ReadBlob returns the blob of d.
func (b Blobs) ReadBlob(_ context.Context, d ocispec.Descriptor) ([]byte, error) {
	if c, ok := b[d.Digest]; ok {
		return c, nil
	}
	return nil, oci.ErrNotFound
}

// Put stores content and returns its descriptor.
func (b Blobs) Put(mediaType string, content []byte) ocispec.Descriptor {
	d := digest.FromBytes(content)
	b[d] = content
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(content))}
}

// PutJSON stores v as JSON.
func (b Blobs) PutJSON(t testing.TB, mediaType string, v any) ocispec.Descriptor {
	t.Helper()
	return b.Put(mediaType, mustJSON(t, v))
}

// Image stores a small image manifest and returns its descriptor.
func (b Blobs) Image(t testing.TB, tag string) ocispec.Descriptor {
	t.Helper()
	cfg := b.Put(ocispec.MediaTypeImageConfig, []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]},"config":{"Labels":{"tag":"`+tag+`"}}}`))
	return b.PutJSON(t, ocispec.MediaTypeImageManifest, ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    cfg,
		Layers:    []ocispec.Descriptor{},
	})
}

// Manifest stores a manifest of these layers, with an empty config as
// cosign gives its signature manifests, and returns its descriptor.
func (b Blobs) Manifest(t testing.TB, layers ...ocispec.Descriptor) ocispec.Descriptor {
	t.Helper()
	return b.PutJSON(t, ocispec.MediaTypeImageManifest, ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    b.Put(ocispec.MediaTypeImageConfig, []byte("{}")),
		Layers:    layers,
	})
}

// SigLayer stores a simple-signing layer of payload p with annotations.
func (b Blobs) SigLayer(p []byte, ann map[string]string) ocispec.Descriptor {
	d := b.Put(MediaTypeSimpleSigning, p)
	d.Annotations = ann
	return d
}

// Legacy stores the .sig manifest cosign sign --key pushes for image of
// Repo, signed by k, and returns it as an archive's index entry, unnamed.
func (b Blobs) Legacy(t testing.TB, image digest.Digest, k *ecdsa.PrivateKey) ocispec.Descriptor {
	t.Helper()
	m := Legacy(t, Repo, image, k)
	maps.Copy(b, m.Blobs)
	return m.Descriptor
}

// LegacyKeyless stores the .sig manifest cosign sign pushes for a keyless
// signature of payload p by the virtual sigstore: the certificate and chain,
// and, when times, the Rekor bundle and the RFC 3161 timestamp.
func (b Blobs) LegacyKeyless(t testing.TB, vs *ca.VirtualSigstore, p []byte, subject string, times bool) ocispec.Descriptor {
	t.Helper()
	return b.Manifest(t, b.SigLayer(p, KeylessAnnotations(t, vs, p, Issuer, subject, times)))
}

// Referrer stores the OCI 1.1 referrer cosign v3 sign pushes for a bundle.
func (b Blobs) Referrer(t testing.TB, subject ocispec.Descriptor, bundleJSON []byte) ocispec.Descriptor {
	t.Helper()
	return b.Attestation(t, subject, bundleJSON, PredicateSign)
}

// Attestation stores the referrer cosign v3 pushes for a bundle of a
// statement of this predicate type; "" leaves the type unsaid.
func (b Blobs) Attestation(t testing.TB, subject ocispec.Descriptor, bundleJSON []byte, predicateType string) ocispec.Descriptor {
	t.Helper()
	subject.Annotations = nil
	ann := map[string]string{"dev.sigstore.bundle.content": "dsse-envelope"}
	if predicateType != "" {
		ann[AnnotationPredicateType] = predicateType
	}
	return b.PutJSON(t, ocispec.MediaTypeImageManifest, ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: MediaTypeBundle,
		Config:       b.Put(ocispec.MediaTypeEmptyJSON, []byte("{}")),
		Layers:       []ocispec.Descriptor{b.Put(MediaTypeBundle, bundleJSON)},
		Subject:      &subject,
		Annotations:  ann,
	})
}

// Statement is the in-toto statement cosign v3 sign signs for an image of
// Repo.
func Statement(t testing.TB, image digest.Digest) []byte {
	t.Helper()
	return StatementOf(t, image, PredicateSign)
}

// StatementOf is an in-toto statement of this predicate type.
func StatementOf(t testing.TB, image digest.Digest, predicateType string) []byte {
	t.Helper()
	return mustJSON(t, map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       []any{map[string]any{"name": Repo, "digest": map[string]string{image.Algorithm().String(): image.Encoded()}}},
		"predicateType": predicateType,
		"predicate":     map[string]any{},
	})
}

// newBundle is the JSON of a v0.3 bundle of a DSSE envelope.
func newBundle(t testing.TB, vm *protobundle.VerificationMaterial, env *dsse.Envelope) []byte {
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

// KeylessBundle is a bundle of the virtual sigstore attesting stmt: the
// certificate, the Rekor entry with its inclusion proof and SET, and an
// RFC 3161 timestamp.
func KeylessBundle(t testing.TB, vs *ca.VirtualSigstore, stmt []byte, subject string) []byte {
	t.Helper()
	ent, err := vs.AttestAtTime(subject, Issuer, stmt, time.Now().Add(5*time.Minute), true)
	if err != nil {
		t.Fatal(err)
	}
	vc, _ := ent.VerificationContent()
	sc, _ := ent.SignatureContent()
	entries, _ := ent.TlogEntries()
	tle, _ := WithSET(t, vs, entries[0])
	ts, _ := ent.Timestamps()
	return newBundle(t, &protobundle.VerificationMaterial{
		Content:     &protobundle.VerificationMaterial_Certificate{Certificate: &protocommon.X509Certificate{RawBytes: vc.Certificate().Raw}},
		TlogEntries: []*protorekor.TransparencyLogEntry{tle},
		TimestampVerificationData: &protobundle.TimestampVerificationData{
			Rfc3161Timestamps: []*protocommon.RFC3161SignedTimestamp{{SignedTimestamp: ts[0]}},
		},
	}, sc.EnvelopeContent().RawEnvelope())
}

// KeyBundle is a bundle of stmt signed with k and nothing else, as cosign
// sign --key --tlog-upload=false makes.
func KeyBundle(t testing.TB, k *ecdsa.PrivateKey, stmt []byte) []byte {
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

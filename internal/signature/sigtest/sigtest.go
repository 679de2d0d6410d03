// Package sigtest makes real cosign signatures for tests: ECDSA P-256 keys,
// the simple-signing payloads cosign signs and the .sig manifests cosign
// sign --key pushes, signed as cosign signs them.
package sigtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"maps"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	"github.com/sigstore/sigstore/pkg/signature/payload"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// What cosign writes; package layout has them too, and its tests use this
// package, so it cannot be imported here.
const (
	MediaTypeSimpleSigning = "application/vnd.dev.cosign.simplesigning.v1+json"
	AnnotationSignature    = "dev.cosignproject.cosign/signature"
)

// NewKey makes an ECDSA P-256 key, the kind cosign generate-key-pair makes.
func NewKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// PublicPEM is k's public key as cosign writes cosign.pub.
func PublicPEM(t testing.TB, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// Payload is the simple-signing payload cosign signs for the image of repo
// with this digest.
func Payload(t testing.TB, repo string, image digest.Digest) []byte {
	t.Helper()
	ref, err := name.NewDigest(repo + "@" + image.String())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := payload.Cosign{Image: ref}.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// Sign signs a payload as cosign sign --key does with an ECDSA key: an
// ASN.1 signature over the payload's sha256, base64 as the annotation
// holds it.
func Sign(t testing.TB, k *ecdsa.PrivateKey, p []byte) string {
	t.Helper()
	sum := sha256.Sum256(p)
	sig, err := ecdsa.SignASN1(rand.Reader, k, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(sig)
}

// Manifest is a signature manifest and the blobs it is made of.
type Manifest struct {
	Descriptor ocispec.Descriptor // the manifest's, unnamed
	// Blobs are the manifest, its config and its layers, by digest.
	Blobs map[digest.Digest][]byte
}

// Bytes lists Blobs' contents: the manifest's, then the others' by digest.
func (m Manifest) Bytes() [][]byte {
	out := [][]byte{m.Blobs[m.Descriptor.Digest]}
	for _, d := range slices.Sorted(maps.Keys(m.Blobs)) {
		if d != m.Descriptor.Digest {
			out = append(out, m.Blobs[d])
		}
	}
	return out
}

// manifest is cosign's empty image (its config an image config with no OS
// or architecture) with these layers appended, as cosign pushes it at
// <repo>:sha256-<hex>.sig.
func manifest(t testing.TB, layers []ocispec.Descriptor, contents [][]byte) Manifest {
	t.Helper()
	var diffIDs []digest.Digest
	for _, l := range layers {
		diffIDs = append(diffIDs, l.Digest)
	}
	rawCfg, err := fixture.CosignConfig(diffIDs)
	if err != nil {
		t.Fatal(err)
	}
	blobs := map[digest.Digest][]byte{}
	blobs[digest.FromBytes(rawCfg)] = rawCfg
	for i, c := range contents {
		blobs[layers[i].Digest] = c
	}
	raw := mustJSON(t, ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(rawCfg), Size: int64(len(rawCfg))},
		Layers:    append([]ocispec.Descriptor{}, layers...),
	})
	d := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(raw), Size: int64(len(raw))}
	blobs[d.Digest] = raw
	return Manifest{Descriptor: d, Blobs: blobs}
}

// Legacy is the .sig manifest cosign sign --key pushes for the image of
// repo with this digest, signed by k: one simple-signing layer.
func Legacy(t testing.TB, repo string, image digest.Digest, k *ecdsa.PrivateKey) Manifest {
	t.Helper()
	p := Payload(t, repo, image)
	layer := ocispec.Descriptor{MediaType: MediaTypeSimpleSigning, Digest: digest.FromBytes(p), Size: int64(len(p)),
		Annotations: map[string]string{AnnotationSignature: Sign(t, k, p)}}
	return manifest(t, []ocispec.Descriptor{layer}, [][]byte{p})
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BlobBundle is the sigstore bundle (v0.3, JSON) cosign sign-blob
// --new-bundle-format --key writes for blob, signed by k, with no
// transparency log entry: what Zarf writes as zarf.bundle.sig over zarf.yaml.
func BlobBundle(t testing.TB, k *ecdsa.PrivateKey, blob []byte) []byte {
	t.Helper()
	sum := sha256.Sum256(blob)
	sig, err := ecdsa.SignASN1(rand.Reader, k, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	b := &protobundle.Bundle{
		MediaType: MediaTypeBundle,
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content: &protobundle.VerificationMaterial_PublicKey{PublicKey: &protocommon.PublicKeyIdentifier{}},
		},
		Content: &protobundle.Bundle_MessageSignature{MessageSignature: &protocommon.MessageSignature{
			MessageDigest: &protocommon.HashOutput{Algorithm: protocommon.HashAlgorithm_SHA2_256, Digest: sum[:]},
			Signature:     sig,
		}},
	}
	raw, err := protojson.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

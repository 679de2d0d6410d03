package signature

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"github.com/sigstore/sigstore-go/pkg/bundle"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/signature/layout"
)

// entity is the sigstore bundle of a signature: the one a referrer carries,
// or one made of a legacy layer.
func entity(s layout.Signature) (*bundle.Bundle, error) {
	switch s.Kind {
	case layout.KindBundle, layout.KindBlob:
		var b bundle.Bundle
		if err := b.UnmarshalJSON(s.Content); err != nil {
			return nil, fmt.Errorf("bundle: %w", err)
		}
		return &b, nil
	case layout.KindSimpleSigning:
		return legacyBundle(s.Layer)
	}
	return nil, fmt.Errorf("unknown kind %q", s.Kind)
}

// legacyBundle makes a bundle v0.1 of a legacy simple-signing layer: a
// message signature over the payload, whose digest is the layer's; the
// certificate, or else a public key to be found among the trusted keys; the
// Rekor entry and the RFC 3161 timestamp, when cosign recorded them.
//
// Only the leaf of a certificate is kept: a v0.1 bundle cannot carry the
// chain, so the intermediates must be in the trusted root.
func legacyBundle(layer ocispec.Descriptor) (*bundle.Bundle, error) {
	ann := layer.Annotations
	b64, ok := ann[oci.AnnotationCosignSignature]
	if !ok || b64 == "" {
		return nil, errors.New("no " + oci.AnnotationCosignSignature + " annotation")
	}
	sig, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", oci.AnnotationCosignSignature, err)
	}
	if layer.Digest.Algorithm() != digest.SHA256 {
		return nil, fmt.Errorf("layer digest %s is not sha256", layer.Digest)
	}
	sum, err := hex.DecodeString(layer.Digest.Encoded())
	if err != nil {
		return nil, fmt.Errorf("layer digest %s: %w", layer.Digest, err)
	}

	vm := &protobundle.VerificationMaterial{}
	if c := ann[oci.AnnotationCosignCertificate]; c != "" {
		block, _ := pem.Decode([]byte(c))
		if block == nil || block.Type != "CERTIFICATE" {
			return nil, errors.New(oci.AnnotationCosignCertificate + ": no PEM certificate")
		}
		vm.Content = &protobundle.VerificationMaterial_X509CertificateChain{
			X509CertificateChain: &protocommon.X509CertificateChain{
				Certificates: []*protocommon.X509Certificate{{RawBytes: block.Bytes}},
			},
		}
	} else {
		vm.Content = &protobundle.VerificationMaterial_PublicKey{PublicKey: &protocommon.PublicKeyIdentifier{}}
	}
	if rb := ann[oci.AnnotationCosignRekorBundle]; rb != "" {
		entry, err := tlogEntry(rb)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", oci.AnnotationCosignRekorBundle, err)
		}
		vm.TlogEntries = []*protorekor.TransparencyLogEntry{entry}
	}
	if ts := ann[oci.AnnotationCosignTimestamp]; ts != "" {
		var t struct{ SignedRFC3161Timestamp []byte }
		if err := json.Unmarshal([]byte(ts), &t); err != nil {
			return nil, fmt.Errorf("%s: %w", oci.AnnotationCosignTimestamp, err)
		}
		if len(t.SignedRFC3161Timestamp) == 0 {
			return nil, errors.New(oci.AnnotationCosignTimestamp + ": no SignedRFC3161Timestamp")
		}
		vm.TimestampVerificationData = &protobundle.TimestampVerificationData{
			Rfc3161Timestamps: []*protocommon.RFC3161SignedTimestamp{{SignedTimestamp: t.SignedRFC3161Timestamp}},
		}
	}

	mediaType, err := bundle.MediaTypeString("0.1")
	if err != nil {
		return nil, err
	}
	return bundle.NewBundle(&protobundle.Bundle{
		MediaType:            mediaType,
		VerificationMaterial: vm,
		Content: &protobundle.Bundle_MessageSignature{MessageSignature: &protocommon.MessageSignature{
			MessageDigest: &protocommon.HashOutput{Algorithm: protocommon.HashAlgorithm_SHA2_256, Digest: sum},
			Signature:     sig,
		}},
	})
}

// rekorBundle is cosign's dev.sigstore.cosign/bundle annotation: a Rekor
// v1 entry and the log's signed promise to include it (the SET).
type rekorBundle struct {
	SignedEntryTimestamp []byte
	Payload              struct {
		Body           string `json:"body"` // base64 of the canonicalized entry
		IntegratedTime int64  `json:"integratedTime"`
		LogIndex       int64  `json:"logIndex"`
		LogID          string `json:"logID"` // hex
	}
}

// tlogEntry is the bundle's form of a Rekor bundle annotation.
func tlogEntry(annotation string) (*protorekor.TransparencyLogEntry, error) {
	var rb rekorBundle
	if err := json.Unmarshal([]byte(annotation), &rb); err != nil {
		return nil, err
	}
	if len(rb.SignedEntryTimestamp) == 0 {
		return nil, errors.New("no SignedEntryTimestamp")
	}
	body, err := base64.StdEncoding.DecodeString(rb.Payload.Body)
	if err != nil {
		return nil, fmt.Errorf("body: %w", err)
	}
	logID, err := hex.DecodeString(rb.Payload.LogID)
	if err != nil {
		return nil, fmt.Errorf("logID: %w", err)
	}
	// The bundle names the entry's kind and version, which the body says.
	var kv struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
	}
	if err := json.Unmarshal(body, &kv); err != nil {
		return nil, fmt.Errorf("body: %w", err)
	}
	return &protorekor.TransparencyLogEntry{
		LogIndex:          rb.Payload.LogIndex,
		LogId:             &protocommon.LogId{KeyId: logID},
		KindVersion:       &protorekor.KindVersion{Kind: kv.Kind, Version: kv.APIVersion},
		IntegratedTime:    rb.Payload.IntegratedTime,
		InclusionPromise:  &protorekor.InclusionPromise{SignedEntryTimestamp: rb.SignedEntryTimestamp},
		CanonicalizedBody: body,
	}, nil
}

package oci

import (
	"strings"

	"github.com/opencontainers/go-digest"
)

// Kinds of the tags cosign gives what it stores beside an image.
const (
	TagSignature   = "signature"   // sha256-<hex>.sig
	TagAttestation = "attestation" // sha256-<hex>.att
	TagSBOM        = "sbom"        // sha256-<hex>.sbom
)

// tagSuffixes are the suffixes of cosign's tags, by kind.
var tagSuffixes = map[string]string{TagSignature: ".sig", TagAttestation: ".att", TagSBOM: ".sbom"}

// CosignTag is a tag cosign gives the signature, attestation or SBOM of an
// image: <algorithm>-<hex> of the image's digest, and a suffix by kind.
type CosignTag struct {
	Kind  string        // TagSignature, TagAttestation or TagSBOM
	Image digest.Digest // "" when a parsed tag's hex is no digest
}

// String is the tag: sha256-<hex>.sig, .att or .sbom.
func (t CosignTag) String() string { return ReferrersTag(t.Image) + tagSuffixes[t.Kind] }

// SignatureTag is the tag cosign gives the signatures of the image with this
// digest: sha256-<hex>.sig.
func SignatureTag(image digest.Digest) string {
	return CosignTag{Kind: TagSignature, Image: image}.String()
}

// ReferrersTag is the tag under which a registry without the referrers API
// lists the referrers of the image with this digest (the OCI distribution
// spec's fallback): sha256-<hex>.
func ReferrersTag(image digest.Digest) string {
	return image.Algorithm().String() + "-" + image.Encoded()
}

// ParseCosignTag says whether a reference's tag is one cosign gives the
// signature, attestation or SBOM of an image (sha256-<hex>.sig, .att,
// .sbom), and which.
func ParseCosignTag(name string) (CosignTag, bool) {
	i := strings.LastIndexByte(name, ':')
	if i < 0 || strings.Contains(name[i:], "/") {
		return CosignTag{}, false
	}
	tag := name[i+1:]
	if !strings.HasPrefix(tag, "sha256-") {
		return CosignTag{}, false
	}
	for kind, suffix := range tagSuffixes {
		if hex, ok := strings.CutSuffix(tag, suffix); ok {
			t := CosignTag{Kind: kind}
			if d, err := digest.Parse(strings.Replace(hex, "-", ":", 1)); err == nil {
				t.Image = d
			}
			return t, true
		}
	}
	return CosignTag{}, false
}

// Media types and annotations of cosign's signatures: the legacy layout's
// simple-signing layers, signed in their annotations, and the sigstore
// bundle a cosign v3 referrer holds as its single layer.
const (
	MediaTypeSimpleSigning  = "application/vnd.dev.cosign.simplesigning.v1+json"
	MediaTypeSigstoreBundle = "application/vnd.dev.sigstore.bundle.v0.3+json"

	AnnotationCosignSignature   = "dev.cosignproject.cosign/signature"
	AnnotationCosignCertificate = "dev.sigstore.cosign/certificate"
	AnnotationCosignChain       = "dev.sigstore.cosign/chain"
	AnnotationCosignRekorBundle = "dev.sigstore.cosign/bundle"
	AnnotationCosignTimestamp   = "dev.sigstore.cosign/rfc3161timestamp"

	// AnnotationBundlePredicateType is what a bundle referrer says its
	// statement is; cosign sign writes PredicateCosignSign, cosign attest
	// anything else.
	AnnotationBundlePredicateType = "dev.sigstore.bundle.predicateType"
	PredicateCosignSign           = "https://sigstore.dev/cosign/sign/v1"
)

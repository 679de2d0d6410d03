package oci

import (
	"slices"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// MediaTypeCosignSignatureArtifact is the artifact type of the referrer
// cosign pushes for a simple-signing signature when it stores signatures as
// OCI 1.1 referrers (cosign sign --registry-referrers-mode=oci-1-1): a
// manifest whose subject is the image, with simple-signing layers and a
// config of this media type.
const MediaTypeCosignSignatureArtifact = "application/vnd.dev.cosign.artifact.sig.v1+json"

// SignatureArtifactTypes are the artifact types of the referrers that may
// be signatures of their subject: cosign v3's sigstore bundles and cosign's
// simple-signing referrers. Attestations, SBOMs and the rest are no
// signatures.
var SignatureArtifactTypes = []string{MediaTypeSigstoreBundle, MediaTypeCosignSignatureArtifact}

// IsSignatureArtifact says whether a referrer of this artifact type and
// these annotations may be a signature of its subject: the type is one of
// SignatureArtifactTypes and, when the annotations say a bundle's predicate
// type, it is cosign's signature's, not an attestation's.
func IsSignatureArtifact(artifactType string, annotations map[string]string) bool {
	if !slices.Contains(SignatureArtifactTypes, artifactType) {
		return false
	}
	p, ok := annotations[AnnotationBundlePredicateType]
	return !ok || p == PredicateCosignSign
}

// ArtifactType is a manifest's artifact type as a referrers list gives it:
// its artifactType, or without one its config's media type.
func ArtifactType(m ocispec.Manifest) string {
	if m.ArtifactType != "" {
		return m.ArtifactType
	}
	return m.Config.MediaType
}

// Referrer kinds, as ReferrerKind sorts the entries of a referrers list.
const (
	ReferrerOther     = iota // no signature: an attestation, an SBOM, an index
	ReferrerSignature        // its artifact type is a signature's
	ReferrerUnsaid           // its artifact type says nothing: the manifest must say
)

// ReferrerKind sorts an entry of a referrers list (the referrers API's
// answer or the fallback tag's index). An entry without an artifact type,
// or with the empty config's (a registry that gives the config's media type
// of a manifest whose artifactType it does not read), is ReferrerUnsaid
// unless its annotations give an attestation's predicate type.
func ReferrerKind(d ocispec.Descriptor) int {
	switch {
	case !IsManifest(d.MediaType):
		return ReferrerOther
	case IsSignatureArtifact(d.ArtifactType, d.Annotations):
		return ReferrerSignature
	case d.ArtifactType != "" && d.ArtifactType != ocispec.MediaTypeEmptyJSON:
		return ReferrerOther
	}
	if p, ok := d.Annotations[AnnotationBundlePredicateType]; ok && p != PredicateCosignSign {
		return ReferrerOther
	}
	return ReferrerUnsaid
}

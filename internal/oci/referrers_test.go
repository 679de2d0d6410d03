package oci

import (
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func TestReferrerKind(t *testing.T) {
	att := map[string]string{AnnotationBundlePredicateType: "https://slsa.dev/provenance/v1"}
	sign := map[string]string{AnnotationBundlePredicateType: PredicateCosignSign}
	for _, c := range []struct {
		what string
		d    ocispec.Descriptor
		want int
	}{
		{"a bundle", ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, ArtifactType: MediaTypeSigstoreBundle}, ReferrerSignature},
		{"a bundle of cosign's signature", ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, ArtifactType: MediaTypeSigstoreBundle, Annotations: sign}, ReferrerSignature},
		{"a bundle of an attestation", ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, ArtifactType: MediaTypeSigstoreBundle, Annotations: att}, ReferrerOther},
		{"cosign's simple-signing referrer", ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, ArtifactType: MediaTypeCosignSignatureArtifact}, ReferrerSignature},
		{"an SBOM", ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, ArtifactType: "application/spdx+json"}, ReferrerOther},
		{"no artifact type", ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest}, ReferrerUnsaid},
		{"the empty config's", ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, ArtifactType: ocispec.MediaTypeEmptyJSON}, ReferrerUnsaid},
		{"the empty config's, an attestation", ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, ArtifactType: ocispec.MediaTypeEmptyJSON, Annotations: att}, ReferrerOther},
		{"an index", ocispec.Descriptor{MediaType: ocispec.MediaTypeImageIndex, ArtifactType: MediaTypeSigstoreBundle}, ReferrerOther},
	} {
		if got := ReferrerKind(c.d); got != c.want {
			t.Errorf("%s: kind %d, want %d", c.what, got, c.want)
		}
	}
}

func TestArtifactType(t *testing.T) {
	m := ocispec.Manifest{Config: ocispec.Descriptor{MediaType: MediaTypeCosignSignatureArtifact}}
	if got := ArtifactType(m); got != MediaTypeCosignSignatureArtifact {
		t.Errorf("without artifactType: %q, want the config's media type", got)
	}
	m.ArtifactType = MediaTypeSigstoreBundle
	if got := ArtifactType(m); got != MediaTypeSigstoreBundle {
		t.Errorf("with artifactType: %q, want it", got)
	}
}

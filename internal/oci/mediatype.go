package oci

import (
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Media types of the Docker image formats beside OCI's.
const (
	MediaTypeDockerManifestList = "application/vnd.docker.distribution.manifest.list.v2+json"
	MediaTypeDockerManifest     = "application/vnd.docker.distribution.manifest.v2+json"
	MediaTypeDockerConfig       = "application/vnd.docker.container.image.v1+json"
	// Docker's schema 1 manifests, which holdfast does not take.
	MediaTypeDockerSchema1    = "application/vnd.docker.distribution.manifest.v1+json"
	MediaTypeDockerSchema1JWS = "application/vnd.docker.distribution.manifest.v1+prettyjws"

	dockerLayerPrefix = "application/vnd.docker.image.rootfs."
	ociLayerPrefix    = "application/vnd.oci.image.layer."
)

// IsIndex reports whether mt is an index (an OCI index or a Docker manifest list).
func IsIndex(mt string) bool {
	return mt == ocispec.MediaTypeImageIndex || mt == MediaTypeDockerManifestList
}

// IsManifest reports whether mt is an image manifest (OCI or Docker).
func IsManifest(mt string) bool {
	return mt == ocispec.MediaTypeImageManifest || mt == MediaTypeDockerManifest
}

// IsDoc reports whether mt is a document that names other blobs: an index or
// a manifest.
func IsDoc(mt string) bool { return IsIndex(mt) || IsManifest(mt) }

// IsImageConfig reports whether mt is an image's config (OCI or Docker), or
// says nothing.
func IsImageConfig(mt string) bool {
	return mt == "" || mt == ocispec.MediaTypeImageConfig || mt == MediaTypeDockerConfig
}

// IsUnpackable reports whether containerd unpacks layers of media type mt:
// the OCI and Docker layer types, plain, gzip or zstd, distributable or not,
// encrypted ones too (an ocicrypt stream processor decrypts them).
func IsUnpackable(mt string) bool {
	mt = strings.TrimSuffix(mt, "+encrypted")
	switch mt {
	case ocispec.MediaTypeImageLayer, ocispec.MediaTypeImageLayerGzip, ocispec.MediaTypeImageLayerZstd,
		ociLayerPrefix + "nondistributable.v1.tar",
		ociLayerPrefix + "nondistributable.v1.tar+gzip",
		ociLayerPrefix + "nondistributable.v1.tar+zstd",
		dockerLayerPrefix + "diff.tar", dockerLayerPrefix + "diff.tar.gzip",
		dockerLayerPrefix + "foreign.diff.tar.gzip":
		return true
	}
	return false
}

// Kind names a blob's role for messages: index, manifest, config, layer or blob.
func Kind(mt string) string {
	switch {
	case IsIndex(mt):
		return "index"
	case IsManifest(mt):
		return "manifest"
	case mt == ocispec.MediaTypeImageConfig || mt == MediaTypeDockerConfig:
		return "config"
	case strings.HasPrefix(mt, ociLayerPrefix) || strings.HasPrefix(mt, dockerLayerPrefix):
		return "layer"
	}
	return "blob"
}

// MediaTypeCycloneDX is the media type of a CycloneDX SBOM in JSON, and the
// artifact type of the referrer that carries one beside its image.
const MediaTypeCycloneDX = "application/vnd.cyclonedx+json"

package oci

import ocispec "github.com/opencontainers/image-spec/specs-go/v1"

// Annotations of index entries, as containerd's own exporter writes them:
// containerd, K3s and holdfast name an image by AnnotationImageName, other
// OCI readers by AnnotationRefName (a full reference, or a bare tag);
// AnnotationManifestSubject marks a referrer of the manifest it names (a
// cosign v3 signature), which no reader takes for an image.
const (
	AnnotationImageName       = "io.containerd.image.name"
	AnnotationRefName         = ocispec.AnnotationRefName       // org.opencontainers.image.ref.name
	AnnotationBaseImageName   = ocispec.AnnotationBaseImageName // org.opencontainers.image.base.name
	AnnotationManifestSubject = "io.containerd.manifest.subject"
)

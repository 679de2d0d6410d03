package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
)

// imageSBOM is the name of the image's SBOM in the SBOM dir.
const imageSBOM = "holdfast-image.cdx.json"

// maxSBOM bounds the image SBOM read.
const maxSBOM = 32 << 20

// addSBOM writes into the layout the image SBOM (file) as an OCI 1.1
// artifact whose subject is the image's index: artifact type CycloneDX,
// the empty config, one layer (the file, titled with its name); the same
// bytes for the same file and time. It returns the manifest's descriptor.
func addSBOM(l *layout, file string, created time.Time) (ocispec.Descriptor, error) {
	info, err := os.Stat(file)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("the image SBOM: %w", err)
	}
	if !info.Mode().IsRegular() || info.Size() > maxSBOM || info.Size() == 0 {
		return ocispec.Descriptor{}, fmt.Errorf("the image SBOM %s: not a regular file of 1 to %d bytes", file, maxSBOM)
	}
	content, err := os.ReadFile(file)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("the image SBOM: %w", err)
	}
	if !json.Valid(content) {
		return ocispec.Descriptor{}, fmt.Errorf("the image SBOM %s is no JSON", file)
	}
	layer, err := l.addBlob(content)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if _, err := l.addBlob(ocispec.DescriptorEmptyJSON.Data); err != nil {
		return ocispec.Descriptor{}, err
	}
	m := ocispec.Manifest{
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: oci.MediaTypeCycloneDX,
		Config:       ocispec.DescriptorEmptyJSON,
		Layers: []ocispec.Descriptor{{
			MediaType: oci.MediaTypeCycloneDX, Digest: layer, Size: int64(len(content)),
			Annotations: map[string]string{ocispec.AnnotationTitle: filepath.Base(file)},
		}},
		Subject:     &ocispec.Descriptor{MediaType: l.index.MediaType, Digest: l.index.Digest, Size: l.index.Size},
		Annotations: map[string]string{ocispec.AnnotationCreated: created.Format(time.RFC3339)},
	}
	m.SchemaVersion = 2
	raw, err := json.Marshal(m)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	d, err := l.addBlob(raw)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	desc := ocispec.Descriptor{MediaType: m.MediaType, Digest: d, Size: int64(len(raw)), ArtifactType: m.ArtifactType}
	l.addReferrer(desc, l.index.Digest)
	return desc, nil
}

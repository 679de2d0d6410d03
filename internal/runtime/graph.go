package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Media types of the Docker image formats beside OCI's.
const (
	dockerManifestList = "application/vnd.docker.distribution.manifest.list.v2+json"
	dockerManifest     = "application/vnd.docker.distribution.manifest.v2+json"
	dockerConfig       = "application/vnd.docker.container.image.v1+json"
	dockerLayerPrefix  = "application/vnd.docker.image.rootfs."
)

// IsIndex reports whether mt is an index (an OCI index or a Docker manifest list).
func IsIndex(mt string) bool { return mt == ocispec.MediaTypeImageIndex || mt == dockerManifestList }

// IsManifest reports whether mt is an image manifest (OCI or Docker).
func IsManifest(mt string) bool { return mt == ocispec.MediaTypeImageManifest || mt == dockerManifest }

// IsDoc reports whether mt is a document that names other blobs: an index or
// a manifest.
func IsDoc(mt string) bool { return IsIndex(mt) || IsManifest(mt) }

// Kind names a blob's role for messages: index, manifest, config, layer or blob.
func Kind(mt string) string {
	switch {
	case IsIndex(mt):
		return "index"
	case IsManifest(mt):
		return "manifest"
	case mt == ocispec.MediaTypeImageConfig || mt == dockerConfig:
		return "config"
	case strings.HasPrefix(mt, "application/vnd.oci.image.layer.") || strings.HasPrefix(mt, dockerLayerPrefix):
		return "layer"
	}
	return "blob"
}

// BlobRef is one blob an image needs; Required ones belong to the host platform.
type BlobRef struct {
	Desc     ocispec.Descriptor
	Required bool
}

// DocFunc returns a document's bytes, or an error wrapping ErrNotFound
// (or containerd's not-found) when it is not there.
type DocFunc func(ctx context.Context, desc ocispec.Descriptor) ([]byte, error)

// parsed is the part of an index or manifest holdfast needs.
type parsed struct {
	MediaType string               `json:"mediaType,omitempty"`
	Manifests []ocispec.Descriptor `json:"manifests,omitempty"`
	Config    *ocispec.Descriptor  `json:"config,omitempty"`
	Layers    []ocispec.Descriptor `json:"layers,omitempty"`
}

func (p parsed) isIndex() bool    { return p.Manifests != nil && !p.isManifest() }
func (p parsed) isManifest() bool { return p.Config != nil && p.Config.Digest != "" }

// parseDoc reads an index or a manifest. Anything else gives a zero parsed.
func parseDoc(desc ocispec.Descriptor, data []byte) (parsed, error) {
	var p parsed
	if err := json.Unmarshal(data, &p); err != nil {
		return parsed{}, fmt.Errorf("parsing %s %s: %w", Kind(desc.MediaType), desc.Digest, err)
	}
	return p, nil
}

// Children lists the blobs a document names, in order: an index's manifests,
// or a manifest's config then its layers. Other blobs have none.
func Children(desc ocispec.Descriptor, data []byte) ([]ocispec.Descriptor, error) {
	p, err := parseDoc(desc, data)
	if err != nil {
		return nil, err
	}
	switch {
	case p.isIndex():
		return p.Manifests, nil
	case p.isManifest():
		return append([]ocispec.Descriptor{*p.Config}, p.Layers...), nil
	}
	return nil, nil
}

// Closure lists every blob reachable from target. Blobs of the host platform are
// required; a missing required document is an error, a missing optional one is
// listed without its children. isNotFound says whether read's error means the
// document is not there.
func Closure(ctx context.Context, target ocispec.Descriptor, read DocFunc, p Platform, isNotFound func(error) bool) ([]BlobRef, error) {
	var out []BlobRef
	seen := map[digest.Digest]bool{}
	var walk func(desc ocispec.Descriptor, required bool) error
	walk = func(desc ocispec.Descriptor, required bool) error {
		if seen[desc.Digest] {
			return nil
		}
		seen[desc.Digest] = true
		out = append(out, BlobRef{Desc: desc, Required: required})
		if !IsDoc(desc.MediaType) {
			return nil
		}
		data, err := read(ctx, desc)
		if err != nil {
			missing := errors.Is(err, ErrNotFound) || isNotFound(err)
			if missing && !required {
				return nil
			}
			if missing {
				return fmt.Errorf("%s %s %s is neither in the archive nor in the store", p, Kind(desc.MediaType), desc.Digest)
			}
			return err
		}
		doc, err := parseDoc(desc, data)
		if err != nil {
			return err
		}
		switch {
		case doc.isIndex():
			best := p.Best(doc.Manifests)
			if required && best < 0 && !hasNestedIndex(doc.Manifests) {
				return fmt.Errorf("index %s has no manifest for %s", desc.Digest, p)
			}
			for i, m := range doc.Manifests {
				childRequired := required && (i == best || (m.Platform == nil && IsIndex(m.MediaType)))
				if err := walk(m, childRequired); err != nil {
					return err
				}
			}
		case doc.isManifest():
			if err := walk(*doc.Config, required); err != nil {
				return err
			}
			for _, l := range doc.Layers {
				if err := walk(l, required); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(target, true); err != nil {
		return nil, err
	}
	return out, nil
}

func hasNestedIndex(ds []ocispec.Descriptor) bool {
	for _, d := range ds {
		if IsIndex(d.MediaType) {
			return true
		}
	}
	return false
}

// Digests are the digests of refs, in order.
func Digests(refs []BlobRef) []digest.Digest {
	out := make([]digest.Digest, len(refs))
	for i, ref := range refs {
		out[i] = ref.Desc.Digest
	}
	return out
}

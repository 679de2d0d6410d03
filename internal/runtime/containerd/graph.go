package containerd

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// blobRef is one blob an image needs; required ones belong to the host platform.
type blobRef struct {
	desc     ocispec.Descriptor
	required bool
}

// docFunc returns a JSON document's bytes, or an error wrapping errdefs.ErrNotFound.
type docFunc func(ctx context.Context, desc ocispec.Descriptor) ([]byte, error)

// parsed is the part of an index or manifest holdfast needs.
type parsed struct {
	MediaType string               `json:"mediaType,omitempty"`
	Manifests []ocispec.Descriptor `json:"manifests,omitempty"`
	Config    *ocispec.Descriptor  `json:"config,omitempty"`
	Layers    []ocispec.Descriptor `json:"layers,omitempty"`
}

func (p parsed) isIndex() bool    { return p.Manifests != nil && !p.isManifest() }
func (p parsed) isManifest() bool { return p.Config != nil && p.Config.Digest != "" }

func isDocType(mt string) bool {
	return images.IsIndexType(mt) || images.IsManifestType(mt)
}

// parseDoc reads an index or a manifest. Anything else gives a zero parsed.
func parseDoc(desc ocispec.Descriptor, data []byte) (parsed, error) {
	var p parsed
	if err := json.Unmarshal(data, &p); err != nil {
		return parsed{}, fmt.Errorf("parsing %s %s: %w", kind(desc.MediaType), desc.Digest, err)
	}
	return p, nil
}

func kind(mt string) string {
	switch {
	case images.IsIndexType(mt):
		return "index"
	case images.IsManifestType(mt):
		return "manifest"
	case images.IsConfigType(mt):
		return "config"
	case images.IsLayerType(mt):
		return "layer"
	}
	return "blob"
}

// closure lists every blob reachable from target. Blobs of the host platform are
// required; a missing required document is an error, a missing optional one is
// listed without its children.
func (r *Runtime) closure(ctx context.Context, target ocispec.Descriptor, read docFunc) ([]blobRef, error) {
	var out []blobRef
	seen := map[digest.Digest]bool{}
	var walk func(desc ocispec.Descriptor, required bool) error
	walk = func(desc ocispec.Descriptor, required bool) error {
		if seen[desc.Digest] {
			return nil
		}
		seen[desc.Digest] = true
		out = append(out, blobRef{desc: desc, required: required})
		if !isDocType(desc.MediaType) {
			return nil
		}
		data, err := read(ctx, desc)
		if err != nil {
			if isNotFound(err) && !required {
				return nil
			}
			if isNotFound(err) {
				return fmt.Errorf("%s %s %s is neither in the archive nor in the store", r.platform, kind(desc.MediaType), desc.Digest)
			}
			return err
		}
		p, err := parseDoc(desc, data)
		if err != nil {
			return err
		}
		switch {
		case p.isIndex():
			best := r.platform.best(p.Manifests)
			if required && best < 0 && !hasNestedIndex(p.Manifests) {
				return fmt.Errorf("index %s has no manifest for %s", desc.Digest, r.platform)
			}
			for i, m := range p.Manifests {
				childRequired := required && (i == best || (m.Platform == nil && images.IsIndexType(m.MediaType)))
				if err := walk(m, childRequired); err != nil {
					return err
				}
			}
		case p.isManifest():
			if err := walk(*p.Config, required); err != nil {
				return err
			}
			for _, l := range p.Layers {
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
		if images.IsIndexType(d.MediaType) {
			return true
		}
	}
	return false
}

// gcLabels are the labels a document needs so that containerd's GC keeps its
// children while anything holds the document.
func gcLabels(desc ocispec.Descriptor, data []byte) (map[string]string, error) {
	p, err := parseDoc(desc, data)
	if err != nil {
		return nil, err
	}
	var children []ocispec.Descriptor
	switch {
	case p.isIndex():
		children = p.Manifests
	case p.isManifest():
		children = append([]ocispec.Descriptor{*p.Config}, p.Layers...)
	default:
		return nil, nil
	}
	labels := map[string]string{}
	for i, c := range children {
		for _, key := range images.ChildGCLabels(c) {
			if strings.HasSuffix(key, ".") {
				key += strconv.Itoa(i)
			}
			labels[key] = c.Digest.String()
		}
	}
	return labels, nil
}

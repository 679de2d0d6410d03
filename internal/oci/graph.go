package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// BlobRef is one blob an image needs; Required ones belong to the host platform.
type BlobRef struct {
	Desc     ocispec.Descriptor
	Required bool
}

// Digests are the digests of refs, in order.
func Digests(refs []BlobRef) []digest.Digest {
	out := make([]digest.Digest, len(refs))
	for i, ref := range refs {
		out[i] = ref.Desc.Digest
	}
	return out
}

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

// Closure lists every blob reachable from target, parents first, each once.
// Blobs of the platform p are required (Required); a missing required
// document is an error, a missing optional one is listed without its
// children.
func Closure(ctx context.Context, target ocispec.Descriptor, r Reader, p Platform) ([]BlobRef, error) {
	c := &closure{r: r, p: p, seen: map[digest.Digest]bool{}, required: map[digest.Digest]bool{target.Digest: true}}
	if err := Walk(ctx, c, target); err != nil {
		return nil, err
	}
	return c.out, nil
}

// closure is the handler of Closure's walk. A blob is required as the
// parent it is first met under says: each parent marks its children as it
// hands them to the walk, which walks them before anything else.
type closure struct {
	r        Reader
	p        Platform
	seen     map[digest.Digest]bool
	required map[digest.Digest]bool
	out      []BlobRef
}

func (c *closure) Handle(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
	if c.seen[desc.Digest] {
		return nil, nil
	}
	c.seen[desc.Digest] = true
	required := c.required[desc.Digest]
	c.out = append(c.out, BlobRef{Desc: desc, Required: required})
	if !IsDoc(desc.MediaType) {
		return nil, nil
	}
	data, err := c.r.ReadBlob(ctx, desc)
	if err != nil {
		missing := errors.Is(err, ErrNotFound)
		if missing && !required {
			return nil, nil
		}
		if missing {
			return nil, fmt.Errorf("%s %s %s is neither in the archive nor in the store", c.p, Kind(desc.MediaType), desc.Digest)
		}
		return nil, err
	}
	doc, err := parseDoc(desc, data)
	if err != nil {
		return nil, err
	}
	switch {
	case doc.isIndex():
		best := c.p.Best(doc.Manifests)
		if required && best < 0 && !HasNestedIndex(doc.Manifests) {
			return nil, fmt.Errorf("index %s has no manifest for %s", desc.Digest, c.p)
		}
		req := Required(doc.Manifests, best)
		c.mark(doc.Manifests, func(i int) bool { return required && req[i] })
		return doc.Manifests, nil
	case doc.isManifest():
		children := append([]ocispec.Descriptor{*doc.Config}, doc.Layers...)
		c.mark(children, func(int) bool { return required })
		return children, nil
	}
	return nil, nil
}

// mark records whether each child is required, the first time a parent
// lists it.
func (c *closure) mark(children []ocispec.Descriptor, required func(i int) bool) {
	marked := map[digest.Digest]bool{}
	for i, ch := range children {
		if !marked[ch.Digest] {
			marked[ch.Digest] = true
			c.required[ch.Digest] = required(i)
		}
	}
}

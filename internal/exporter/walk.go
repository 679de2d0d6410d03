package exporter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// walker reads what images need from the store, each blob's presence and
// each document once.
type walker struct {
	c    runtime.Content
	p    runtime.Platform
	has  map[digest.Digest]bool
	docs map[digest.Digest][]byte
}

func newWalker(c runtime.Content) *walker {
	return &walker{c: c, p: c.Platform(), has: map[digest.Digest]bool{}, docs: map[digest.Digest][]byte{}}
}

// walked is what one image exports.
type walked struct {
	blobs []ocispec.Descriptor // every blob, parents first
	host  *hostManifest        // the host platform's manifest, for manifest.json
	left  []string             // what of other platforms is left out, and why
}

// hostManifest is the manifest a docker save reader takes of an image.
type hostManifest struct {
	ocispec.Descriptor
	config digest.Digest
	layers []digest.Digest
}

// missingError says a blob an image needs is not in the store.
type missingError struct {
	p    runtime.Platform
	desc ocispec.Descriptor
}

func (e *missingError) Error() string {
	return fmt.Sprintf("%s %s %s is not in the store", e.p, runtime.Kind(e.desc.MediaType), e.desc.Digest)
}

// image walks target: the host platform's content must be whole; each
// other platform's manifest is taken when all of it is in the store, and
// left out (said in left) otherwise, as a node that pulled or imported
// only its own platform holds it. An index with no manifest for the host
// platform needs one other platform whole.
func (w *walker) image(ctx context.Context, target ocispec.Descriptor) (walked, error) {
	var res walked
	blobs, ok, err := w.walk(ctx, target, true, &res)
	if err != nil {
		return res, err
	}
	if !ok {
		return res, &missingError{w.p, target}
	}
	res.blobs = blobs
	res.host, err = w.host(ctx, target)
	return res, err
}

// walk returns desc and what it names. A required blob that is missing is
// an error; a missing optional one makes the manifest that needs it
// incomplete (ok false), and so left out by its index.
func (w *walker) walk(ctx context.Context, desc ocispec.Descriptor, required bool, res *walked) ([]ocispec.Descriptor, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	has, err := w.present(ctx, desc)
	if err != nil {
		return nil, false, err
	}
	if !has {
		if required {
			return nil, false, &missingError{w.p, desc}
		}
		return nil, false, nil
	}
	out, err := w.children(ctx, desc, required, res)
	var missing *missingError
	if !required && errors.As(err, &missing) {
		return nil, false, nil
	}
	return out, err == nil && out != nil, err
}

// children returns desc and, for a document, what it names; nil when an
// optional manifest is not whole.
func (w *walker) children(ctx context.Context, desc ocispec.Descriptor, required bool, res *walked) ([]ocispec.Descriptor, error) {
	out := []ocispec.Descriptor{desc}
	switch {
	case runtime.IsIndex(desc.MediaType):
		var idx ocispec.Index
		if err := w.doc(ctx, desc, &idx); err != nil {
			return nil, err
		}
		children, err := w.index(ctx, desc, idx, required, res)
		if err != nil {
			return nil, err
		}
		out = append(out, children...)
	case runtime.IsManifest(desc.MediaType):
		var m ocispec.Manifest
		if err := w.doc(ctx, desc, &m); err != nil {
			return nil, err
		}
		for _, c := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
			sub, ok, err := w.walk(ctx, c, required, res)
			if err != nil || !ok {
				return nil, err
			}
			out = append(out, sub...)
		}
	}
	return out, nil
}

// index walks an index's manifests: the host platform's is required when
// the index is; the others are taken when whole.
func (w *walker) index(ctx context.Context, desc ocispec.Descriptor, idx ocispec.Index, required bool, res *walked) ([]ocispec.Descriptor, error) {
	best := w.p.Best(idx.Manifests)
	var out []ocispec.Descriptor
	whole := 0
	for i, m := range idx.Manifests {
		childRequired := required && (i == best || (m.Platform == nil && runtime.IsIndex(m.MediaType)))
		sub, ok, err := w.walk(ctx, m, childRequired, res)
		if err != nil {
			return nil, err
		}
		if !ok {
			res.left = append(res.left, fmt.Sprintf("%s %s (%s) left out: not whole in the store", runtime.Kind(m.MediaType), m.Digest, platformOf(m)))
			continue
		}
		whole++
		out = append(out, sub...)
	}
	if required && best < 0 && whole == 0 {
		return nil, fmt.Errorf("index %s has no manifest for %s, and no other platform's manifest is whole in the store", desc.Digest, w.p)
	}
	return out, nil
}

// host is the manifest of target a docker save reader takes: target
// itself, or the host platform's manifest of an index; nil when there is
// none.
func (w *walker) host(ctx context.Context, desc ocispec.Descriptor) (*hostManifest, error) {
	for depth := 0; runtime.IsIndex(desc.MediaType); depth++ {
		var idx ocispec.Index
		if err := w.doc(ctx, desc, &idx); err != nil {
			return nil, err
		}
		best := w.p.Best(idx.Manifests)
		if best < 0 || depth > 8 {
			return nil, nil
		}
		desc = idx.Manifests[best]
	}
	if !runtime.IsManifest(desc.MediaType) {
		return nil, nil
	}
	var m ocispec.Manifest
	if err := w.doc(ctx, desc, &m); err != nil {
		return nil, err
	}
	h := &hostManifest{Descriptor: desc, config: m.Config.Digest}
	for _, l := range m.Layers {
		h.layers = append(h.layers, l.Digest)
	}
	return h, nil
}

// present says whether the store holds d, asking once.
func (w *walker) present(ctx context.Context, desc ocispec.Descriptor) (bool, error) {
	if has, ok := w.has[desc.Digest]; ok {
		return has, nil
	}
	has, err := w.c.Has(ctx, desc.Digest)
	if err != nil {
		return false, fmt.Errorf("checking %s %s: %w", runtime.Kind(desc.MediaType), desc.Digest, err)
	}
	w.has[desc.Digest] = has
	return has, nil
}

// doc reads and parses a document the store holds.
func (w *walker) doc(ctx context.Context, desc ocispec.Descriptor, v any) error {
	data, err := w.read(ctx, desc)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("parsing %s %s: %w", runtime.Kind(desc.MediaType), desc.Digest, err)
	}
	return nil
}

// read reads a small blob the store holds, once, checked against its
// descriptor.
func (w *walker) read(ctx context.Context, desc ocispec.Descriptor) ([]byte, error) {
	if b, ok := w.docs[desc.Digest]; ok {
		return b, nil
	}
	if desc.Size > maxDocSize {
		return nil, fmt.Errorf("%s %s: %d bytes is too large for a document (at most %d)", runtime.Kind(desc.MediaType), desc.Digest, desc.Size, maxDocSize)
	}
	b, err := w.c.ReadBlob(ctx, desc)
	if err != nil {
		if w.c.IsNotFound(err) {
			return nil, &missingError{w.p, desc}
		}
		return nil, fmt.Errorf("reading %s %s: %w", runtime.Kind(desc.MediaType), desc.Digest, err)
	}
	if int64(len(b)) != desc.Size || desc.Digest.Algorithm().FromBytes(b) != desc.Digest {
		return nil, fmt.Errorf("%s %s in the store does not match its descriptor", runtime.Kind(desc.MediaType), desc.Digest)
	}
	w.docs[desc.Digest] = b
	return b, nil
}

func platformOf(d ocispec.Descriptor) string {
	if d.Platform == nil {
		return "no platform"
	}
	p := d.Platform.OS + "/" + d.Platform.Architecture
	if d.Platform.Variant != "" {
		p += "/" + d.Platform.Variant
	}
	return p
}

package exporter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// walker reads what images need from the store, each blob's presence and
// each document once.
type walker struct {
	c    runtime.Content
	p    oci.Platform
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
	p    oci.Platform
	desc ocispec.Descriptor
}

func (e *missingError) Error() string {
	return fmt.Sprintf("%s %s %s is not in the store", e.p, oci.Kind(e.desc.MediaType), e.desc.Digest)
}

// image walks target: the host platform's content must be whole; each
// other platform's manifest is taken when all of it is in the store, and
// left out (said in left) otherwise, as a node that pulled or imported
// only its own platform holds it. An index with no manifest for the host
// platform needs one other platform whole.
func (w *walker) image(ctx context.Context, target ocispec.Descriptor) (walked, error) {
	var res walked
	blobs, ok, err := w.unit(ctx, target, true, &res)
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

// unit walks desc and what it names (oci.Walk), whole or not at all: a
// blob missing from a required unit is an error; one missing from an
// optional unit (another platform's manifest) leaves the unit out (ok
// false), and so its index leaves it out. An index's manifests are units
// of their own (index).
func (w *walker) unit(ctx context.Context, desc ocispec.Descriptor, required bool, res *walked) ([]ocispec.Descriptor, bool, error) {
	var out []ocispec.Descriptor
	err := oci.Walk(ctx, oci.HandlerFunc(func(ctx context.Context, d ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		has, err := w.present(ctx, d)
		if err != nil {
			return nil, err
		}
		if !has {
			return nil, &missingError{w.p, d}
		}
		out = append(out, d)
		switch {
		case oci.IsIndex(d.MediaType):
			var idx ocispec.Index
			if err := w.doc(ctx, d, &idx); err != nil {
				return nil, err
			}
			sub, err := w.index(ctx, d, idx, required, res)
			out = append(out, sub...)
			return nil, err
		case oci.IsManifest(d.MediaType):
			var m ocispec.Manifest
			if err := w.doc(ctx, d, &m); err != nil {
				return nil, err
			}
			return append([]ocispec.Descriptor{m.Config}, m.Layers...), nil
		}
		return nil, nil
	}), desc)
	var missing *missingError
	if !required && errors.As(err, &missing) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// index walks an index's manifests, each a unit: those the platform rule
// requires (oci.Required) when the index is required; the others are
// taken when whole.
func (w *walker) index(ctx context.Context, desc ocispec.Descriptor, idx ocispec.Index, required bool, res *walked) ([]ocispec.Descriptor, error) {
	best := w.p.Best(idx.Manifests)
	needed := oci.Required(idx.Manifests, best)
	var out []ocispec.Descriptor
	whole := 0
	for i, m := range idx.Manifests {
		sub, ok, err := w.unit(ctx, m, required && needed[i], res)
		if err != nil {
			return nil, err
		}
		if !ok {
			res.left = append(res.left, fmt.Sprintf("%s %s (%s) left out: not whole in the store", oci.Kind(m.MediaType), m.Digest, platformOf(m)))
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
	for depth := 0; oci.IsIndex(desc.MediaType); depth++ {
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
	if !oci.IsManifest(desc.MediaType) {
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
		return false, fmt.Errorf("checking %s %s: %w", oci.Kind(desc.MediaType), desc.Digest, err)
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
		return fmt.Errorf("parsing %s %s: %w", oci.Kind(desc.MediaType), desc.Digest, err)
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
		return nil, fmt.Errorf("%s %s: %d bytes is too large for a document (at most %d)", oci.Kind(desc.MediaType), desc.Digest, desc.Size, maxDocSize)
	}
	b, err := w.c.ReadBlob(ctx, desc)
	if err != nil {
		if errors.Is(err, oci.ErrNotFound) {
			return nil, &missingError{w.p, desc}
		}
		return nil, fmt.Errorf("reading %s %s: %w", oci.Kind(desc.MediaType), desc.Digest, err)
	}
	if int64(len(b)) != desc.Size || desc.Digest.Algorithm().FromBytes(b) != desc.Digest {
		return nil, fmt.Errorf("%s %s in the store does not match its descriptor", oci.Kind(desc.MediaType), desc.Digest)
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

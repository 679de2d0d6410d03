package exporter

import (
	"context"
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
)

// whole checks, before anything is written, that the plan's layout names
// no blob it does not hold: every index.json entry is among its blobs, and
// so are the config and layers of each manifest reached from them (an
// index's manifests of other platforms may be left out: a reader takes
// the platforms the archive holds), and every blob manifest.json names.
// An error names the image, the document and the blob; a signature
// manifest whose config or layer the store lost (or never kept) is one.
func whole(ctx context.Context, w *walker, p *Plan) error {
	held := map[digest.Digest]bool{}
	for _, b := range p.Layout.Blobs {
		held[b.Desc.Digest] = true
	}
	names := map[digest.Digest][]string{}
	for _, img := range p.Images {
		names[img.Target.Digest] = append(names[img.Target.Digest], img.Name)
	}
	seen := map[digest.Digest]bool{}
	for _, e := range p.Layout.Index {
		image, kind, sig := entryOf(e, names)
		if !held[e.Digest] {
			return fmt.Errorf("image %s: %s %s is not among the blobs to write", image, kind, e.Digest)
		}
		if err := w.whole(ctx, e, kind, held, seen); err != nil {
			if sig {
				return fmt.Errorf("image %s: %w; import its source again to keep the signature whole", image, err)
			}
			return fmt.Errorf("image %s: %w", image, err)
		}
	}
	for _, e := range p.Layout.DockerSave {
		for _, d := range append([]digest.Digest{e.Config}, e.Layers...) {
			if !held[d] {
				return fmt.Errorf("image %s: manifest.json names %s, which is not among the blobs to write", strings.Join(e.RepoTags, ", "), d)
			}
		}
	}
	return nil
}

// whole walks the entry root (oci.Walk) and checks that what each
// manifest names is held; for an index, it walks each of its manifests
// that is held. kind is what root is called in a message.
func (w *walker) whole(ctx context.Context, root ocispec.Descriptor, kind string, held, seen map[digest.Digest]bool) error {
	return oci.Walk(ctx, oci.HandlerFunc(func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		if seen[desc.Digest] {
			return nil, nil
		}
		seen[desc.Digest] = true
		switch {
		case oci.IsIndex(desc.MediaType):
			var idx ocispec.Index
			if err := w.doc(ctx, desc, &idx); err != nil {
				return nil, err
			}
			var next []ocispec.Descriptor
			for _, m := range idx.Manifests {
				if held[m.Digest] {
					next = append(next, m)
				}
			}
			return next, nil
		case oci.IsManifest(desc.MediaType):
			var m ocispec.Manifest
			if err := w.doc(ctx, desc, &m); err != nil {
				return nil, err
			}
			k := oci.Kind(desc.MediaType)
			if desc.Digest == root.Digest {
				k = kind
			}
			return nil, w.manifestWhole(ctx, desc, k, m, held)
		}
		return nil, nil
	}), root)
}

// manifestWhole checks that the layout holds the config and layers of the
// manifest m (desc), called kind in a message.
func (w *walker) manifestWhole(ctx context.Context, desc ocispec.Descriptor, kind string, m ocispec.Manifest, held map[digest.Digest]bool) error {
	for _, c := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		if held[c.Digest] {
			continue
		}
		why := "which the export left out"
		if has, err := w.present(ctx, c); err != nil {
			return err
		} else if !has {
			why = "which is not in the store"
		}
		return fmt.Errorf("%s %s names %s %s, %s", kind, desc.Digest, oci.Kind(c.MediaType), c.Digest, why)
	}
	return nil
}

// entryOf says what an index.json entry is for a message: the image it is
// (its names) or signs, its kind, and whether it is a signature.
func entryOf(e ocispec.Descriptor, names map[digest.Digest][]string) (image, kind string, sig bool) {
	if ns, ok := names[e.Digest]; ok {
		return strings.Join(ns, ", "), oci.Kind(e.MediaType), false
	}
	signed := digest.Digest(e.Annotations[oci.AnnotationManifestSubject])
	if t, ok := signatureTagOf(e.Annotations[oci.AnnotationImageName]); ok {
		signed = t
	}
	if ns, ok := names[signed]; ok {
		return strings.Join(ns, ", "), "signature manifest", true
	}
	if n := e.Annotations[oci.AnnotationImageName]; n != "" {
		return n, oci.Kind(e.MediaType), false
	}
	return e.Digest.String(), oci.Kind(e.MediaType), false
}

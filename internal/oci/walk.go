package oci

import (
	"context"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Handler handles one blob a walk meets and returns the children to walk
// into next (none for a blob that names nothing, or that the handler has
// met already): what a walk does is its handler's.
type Handler interface {
	Handle(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error)
}

// HandlerFunc is a function that handles blobs as a Handler does.
type HandlerFunc func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
	return f(ctx, desc)
}

// Walk hands each of descs to h, in order, and walks each one's children
// before the next: depth first, parents before children. The first error
// ends the walk.
func Walk(ctx context.Context, h Handler, descs ...ocispec.Descriptor) error {
	for _, desc := range descs {
		children, err := h.Handle(ctx, desc)
		if err != nil {
			return err
		}
		if len(children) > 0 {
			if err := Walk(ctx, h, children...); err != nil {
				return err
			}
		}
	}
	return nil
}

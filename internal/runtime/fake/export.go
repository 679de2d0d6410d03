package fake

import (
	"bytes"
	"context"
	"io"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

var _ runtime.Content = store{}

// OpenBlob streams a blob of the fake's store.
func (s store) OpenBlob(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
	b, err := s.ReadBlob(ctx, desc)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

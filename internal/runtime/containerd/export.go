package containerd

import (
	"context"
	"fmt"
	"io"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

var _ runtime.Content = importStore{}

// OpenBlob streams a blob from the content store, as an export reads it
// (internal/exporter); one that is not there is oci.ErrNotFound.
func (s importStore) OpenBlob(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
	ra, err := s.r.client.ContentStore().ReaderAt(ctx, desc)
	if errdefs.IsNotFound(err) {
		return nil, oci.NotFound(err)
	}
	if err != nil {
		return nil, err
	}
	if ra.Size() != desc.Size {
		ra.Close()
		return nil, fmt.Errorf("blob %s is %d bytes in the content store, its descriptor says %d", desc.Digest, ra.Size(), desc.Size)
	}
	return readerAtCloser{Reader: content.NewReader(ra), c: ra}, nil
}

// readerAtCloser reads a content.ReaderAt from its start, and closes it.
type readerAtCloser struct {
	io.Reader
	c io.Closer
}

func (r readerAtCloser) Close() error { return r.c.Close() }

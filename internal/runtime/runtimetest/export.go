package runtimetest

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// exportReadsBlobs: what an export reads (the store's runtime.Content) is
// what an import wrote: each blob of an imported image streams whole, with
// its digest, and a blob the store lacks is oci.ErrNotFound.
func exportReadsBlobs(t *testing.T, b Backend, _ string) {
	ctx := context.Background()
	var c runtime.Content = b.Runtime.ImportStore()
	res, err := b.Import(ctx, b.Runtime.ImportStore(), runtime.ImportRequest{Source: "/conformance/export.tar", Identity: "id-1", Open: b.Archive})
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	refs, err := oci.Closure(ctx, res.Images[0].Target, c, c.Platform())
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		if has, err := c.Has(ctx, ref.Desc.Digest); err != nil || !has {
			t.Errorf("%s: Has says %v, %v; the import wrote it", ref.Desc.Digest, has, err)
			continue
		}
		r, err := c.OpenBlob(ctx, ref.Desc)
		if err != nil {
			t.Errorf("opening %s: %v", ref.Desc.Digest, err)
			continue
		}
		data, err := io.ReadAll(r)
		r.Close()
		if err != nil || int64(len(data)) != ref.Desc.Size || digest.FromBytes(data) != ref.Desc.Digest {
			t.Errorf("%s: streamed %d bytes with digest %s (%v); want %d", ref.Desc.Digest, len(data), digest.FromBytes(data), err, ref.Desc.Size)
		}
	}
	absent := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromString("no such blob"), Size: 12}
	if has, err := c.Has(ctx, absent.Digest); err != nil || has {
		t.Errorf("Has of a blob never written: %v, %v", has, err)
	}
	if r, err := c.OpenBlob(ctx, absent); !errors.Is(err, oci.ErrNotFound) {
		if r != nil {
			r.Close()
		}
		t.Errorf("opening a blob never written: %v; want oci.ErrNotFound", err)
	}
}

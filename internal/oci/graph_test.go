package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// blobs is a store in memory.
type blobs map[digest.Digest][]byte

func (b blobs) ReadBlob(_ context.Context, d ocispec.Descriptor) ([]byte, error) {
	if c, ok := b[d.Digest]; ok {
		return c, nil
	}
	return nil, NotFound(fmt.Errorf("blob %s: gone", d.Digest))
}

func (b blobs) put(t *testing.T, mt string, v any) ocispec.Descriptor {
	t.Helper()
	raw, ok := v.([]byte)
	if !ok {
		var err error
		if raw, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	d := ocispec.Descriptor{MediaType: mt, Digest: digest.FromBytes(raw), Size: int64(len(raw))}
	b[d.Digest] = raw
	return d
}

// image is a two-platform index in b: the host's manifest and another's,
// each with a config and a layer.
func image(t *testing.T, b blobs, p Platform) (index, host, other ocispec.Descriptor) {
	manifest := func(arch string) ocispec.Descriptor {
		cfg := b.put(t, ocispec.MediaTypeImageConfig, []byte(`{"architecture":"`+arch+`"}`))
		layer := b.put(t, ocispec.MediaTypeImageLayerGzip, []byte("layer "+arch))
		m := b.put(t, ocispec.MediaTypeImageManifest, ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, Config: cfg, Layers: []ocispec.Descriptor{layer}})
		return m
	}
	host = manifest(p.spec.Architecture)
	host.Platform = &p.spec
	other = manifest("elsewhere")
	other.Platform = &ocispec.Platform{OS: "plan9", Architecture: "elsewhere"}
	index = b.put(t, ocispec.MediaTypeImageIndex, ocispec.Index{MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{host, other}})
	return index, host, other
}

// TestClosure: the host platform's blobs are required, another platform's
// optional; a missing optional document is listed without its children, a
// missing required one is an error.
func TestClosure(t *testing.T) {
	ctx := context.Background()
	p := HostPlatform()
	b := blobs{}
	index, host, other := image(t, b, p)
	refs, err := Closure(ctx, index, b, p)
	if err != nil {
		t.Fatal(err)
	}
	required := map[digest.Digest]bool{}
	for _, r := range refs {
		required[r.Desc.Digest] = r.Required
	}
	if len(refs) != 7 || !required[index.Digest] || !required[host.Digest] || required[other.Digest] {
		t.Fatalf("closure %+v: want 7 blobs, the index and the host's manifest required, the other's not", refs)
	}
	if Digests(refs)[0] != index.Digest {
		t.Errorf("closure starts with %s; want the index, parents first", Digests(refs)[0])
	}
	delete(b, other.Digest)
	if refs, err = Closure(ctx, index, b, p); err != nil || len(refs) != 5 {
		t.Errorf("another platform's manifest gone: %d blobs, %v; want 5 (its manifest listed, not its children)", len(refs), err)
	}
	delete(b, host.Digest)
	if _, err = Closure(ctx, index, b, p); err == nil || !strings.Contains(err.Error(), "is neither in the archive nor in the store") {
		t.Errorf("the host's manifest gone: %v; want an error naming it missing", err)
	}
}

// TestNotFound: a not-found error keeps its message and its cause.
func TestNotFound(t *testing.T) {
	cause := errors.New("content digest sha256:00: not found")
	err := fmt.Errorf("reading: %w", NotFound(cause))
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, cause) || err.Error() != "reading: "+cause.Error() {
		t.Errorf("%v: want ErrNotFound, its cause, and the cause's message", err)
	}
}

// TestWalk: parents before children, depth first, and the first error
// ends the walk.
func TestWalk(t *testing.T) {
	d := func(s string) ocispec.Descriptor {
		return ocispec.Descriptor{Digest: digest.FromString(s), Annotations: map[string]string{"n": s}}
	}
	tree := map[string][]ocispec.Descriptor{"a": {d("b"), d("c")}, "b": {d("d")}}
	var order []string
	stop := errors.New("stop")
	h := HandlerFunc(func(_ context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		n := desc.Annotations["n"]
		order = append(order, n)
		if n == "e" {
			return nil, stop
		}
		return tree[n], nil
	})
	if err := Walk(context.Background(), h, d("a"), d("e"), d("f")); !errors.Is(err, stop) {
		t.Fatalf("Walk: %v; want the handler's error", err)
	}
	if got := strings.Join(order, ""); got != "abdce" {
		t.Errorf("order %s; want abdce", got)
	}
}

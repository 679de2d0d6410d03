package runtimetest

import (
	"context"
	"crypto/rand"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
)

// countingRegistry is a registry on 127.0.0.1 that notes every request it
// serves: the method, the path and its X-Spegel-Mirrored header.
type countingRegistry struct {
	srv  *httptest.Server
	host string
	mu   sync.Mutex
	seen []string // "GET /v2/…/blobs/sha256:… mirrored=true"
}

func newCountingRegistry(t *testing.T) *countingRegistry {
	t.Helper()
	c := &countingRegistry{}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.seen = append(c.seen, r.Method+" "+r.URL.Path+" mirrored="+r.Header.Get("X-Spegel-Mirrored"))
		c.mu.Unlock()
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(c.srv.Close)
	c.host = strings.TrimPrefix(c.srv.URL, "http://")
	return c
}

// forget drops what it noted (the pushes that filled it).
func (c *countingRegistry) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = nil
}

// requests are the requests it noted whose line contains each of parts.
func (c *countingRegistry) requests(parts ...string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, s := range c.seen {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(s, p)
		}
		if all {
			out = append(out, s)
		}
	}
	return out
}

// layeredImage stores an image of one layer of random bytes, which no store
// holds yet, and returns its manifest and the layer.
func layeredImage(t *testing.T, b sigtest.Blobs) (manifest, layer ocispec.Descriptor) {
	t.Helper()
	data := make([]byte, 256<<10)
	_, _ = rand.Read(data)
	layer = b.Put(ocispec.MediaTypeImageLayer, data)
	cfg := b.Put(ocispec.MediaTypeImageConfig, []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":["`+layer.Digest.String()+`"]}}`))
	manifest = b.PutJSON(t, ocispec.MediaTypeImageManifest, ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    cfg,
		Layers:    []ocispec.Descriptor{layer},
	})
	return manifest, layer
}

// pullPreferred pulls ref with opts.Prefer set to prefer, under a lease of
// its own released when t ends, and fails t unless it gives want.
func pullPreferred(t *testing.T, rt runtime.Runtime, ref, prefer string, want ocispec.Descriptor) {
	t.Helper()
	ctx := context.Background()
	lease, err := rt.TempLease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Release(context.WithoutCancel(ctx), lease) })
	w, err := rt.Pull(ctx, ref, runtime.PullOptions{Lease: lease, Timeout: 2 * time.Minute, Prefer: prefer})
	if err != nil {
		t.Fatalf("pull of %s preferring %s: %v", ref, prefer, err)
	}
	if w.Target.Digest != want.Digest {
		t.Fatalf("pull of %s gave %s, want %s", ref, w.Target.Digest, want.Digest)
	}
}

// pullPrefersHolder: a pull with a preferred peer mirror (a holder of the
// image) resolves the tag at the image's registry and fetches the
// manifest, config and layer from the holder, asking it for what it holds
// itself (X-Spegel-Mirrored: true); the registry serves no blob. With the
// holder gone (its port closed), the pull of another image still works,
// from the registry.
func pullPrefersHolder(t *testing.T, s Store, _ string) {
	needPulls(t, s)
	origin, holder := newCountingRegistry(t), newCountingRegistry(t)
	blobs := sigtest.Blobs{}
	image, layer := layeredImage(t, blobs)
	ref := origin.host + "/conformance/prefer:1"
	for _, r := range []string{ref, holder.host + "/conformance/prefer:1"} {
		if err := blobs.Push(r, image); err != nil {
			t.Fatal(err)
		}
	}
	origin.forget()
	holder.forget()
	pullPreferred(t, s.Runtime, ref, holder.srv.URL, image)
	for _, d := range []ocispec.Descriptor{layer, image} {
		if got := holder.requests("GET ", d.Digest.String(), "mirrored=true"); len(got) == 0 {
			t.Errorf("the holder served no GET of %s asking for its own content; it saw %v", d.Digest, holder.requests())
		}
	}
	if got := holder.requests("/manifests/1"); len(got) != 0 {
		t.Errorf("the tag was resolved at the holder: %v", got)
	}
	if got := origin.requests("GET ", "/blobs/"); len(got) != 0 {
		t.Errorf("the registry served blobs the holder holds: %v", got)
	}
	if got := origin.requests("/manifests/1"); len(got) == 0 {
		t.Errorf("the tag was not resolved at the registry: it saw %v", origin.requests())
	}

	gone := newCountingRegistry(t)
	gone.srv.Close()
	other, otherLayer := layeredImage(t, blobs)
	ref = origin.host + "/conformance/prefer:2"
	if err := blobs.Push(ref, other); err != nil {
		t.Fatal(err)
	}
	origin.forget()
	pullPreferred(t, s.Runtime, ref, gone.srv.URL, other)
	if got := origin.requests("GET ", "/blobs/"+otherLayer.Digest.String()); len(got) == 0 {
		t.Errorf("with the holder gone, the registry served no layer: it saw %v", origin.requests())
	}
}

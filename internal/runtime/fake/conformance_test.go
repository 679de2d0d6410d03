package fake_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/importer"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/runtime/runtimetest"
	"github.com/holdfast-project/holdfast/internal/testenv/testimage"
)

// TestConformance: the fake behaves as the suite says every runtime must, so
// the agent's unit tests over it stand for a real store.
func TestConformance(t *testing.T) {
	img, err := fixture.Build(context.Background(), fixture.ImageSpec{Names: []string{"fake.example/conformance/imported:1"}, Layers: fixture.UniformLayers(2, 16<<10, false, 7)})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := fixture.WriteOCI(context.Background(), &buf, fixture.OCIOptions{Names: fixture.NameContainerd}, img); err != nil {
		t.Fatal(err)
	}
	archive := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil }
	backend := func(t *testing.T, rt *fake.Runtime) runtimetest.Backend {
		a, b := testimage.Stored(t, rt, "fake.example/conformance/a:1"), testimage.Stored(t, rt, "fake.example/conformance/b:1")
		return runtimetest.Backend{
			Runtime:      rt,
			Import:       importer.Import,
			LeaseWants:   importer.LeaseWants,
			CreateRecord: func(_ *testing.T, img runtime.Image) { rt.Create(img) },
			Targets:      [2]ocispec.Descriptor{a.Target, b.Target},
			Archive:      archive,
			Name:         "fake.example/conformance/imported:1",
		}
	}
	runtimetest.Run(t, "fake.example/conformance/", func(t *testing.T) runtimetest.Backend { return backend(t, fake.New()) })
	// The cases that need more of a store than the runtime's interface,
	// within what the fake can do (its Capabilities).
	runtimetest.RunFurther(t, "fake.example/conformance/", func(t *testing.T) runtimetest.Store {
		rt := fake.New()
		rt.Expires = true // a 2.x store: the expiry case shows the rule
		return runtimetest.Store{
			Backend:    backend(t, rt),
			Can:        runtimetest.Capabilities{ExpireRecords: true},
			DeleteBlob: func(_ *testing.T, d digest.Digest) { rt.DeleteBlob(d) },
			NoCRI:      func(*testing.T) runtime.Runtime { rt.SetNoCRI(true); return rt },
			Another:    func(*testing.T) runtime.Runtime { return rt },
			Label: func(t *testing.T, name, key, value string) {
				if !rt.Label(name, key, value) {
					t.Fatalf("labelling %s: no record", name)
				}
			},
			GC: func(*testing.T) { rt.GC(time.Now()) },
		}
	})
}

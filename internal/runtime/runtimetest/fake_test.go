package runtimetest_test

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/runtime/runtimetest"
	"github.com/holdfast-project/holdfast/internal/testenv/testimage"
)

// TestFurtherOnFake: the fake passes the cases that need more of a store
// than the runtime's interface, within what it can do (its Capabilities).
func TestFurtherOnFake(t *testing.T) {
	img, err := fixture.Build(context.Background(), fixture.ImageSpec{Names: []string{"fake.example/further/imported:1"}, Layers: fixture.UniformLayers(2, 16<<10, false, 7)})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := fixture.WriteOCI(context.Background(), &buf, fixture.OCIOptions{Names: fixture.NameContainerd}, img); err != nil {
		t.Fatal(err)
	}
	runtimetest.RunFurther(t, "fake.example/further/", func(t *testing.T) runtimetest.Store {
		rt := fake.New()
		a, b := testimage.Stored(t, rt, "fake.example/further/a:1"), testimage.Stored(t, rt, "fake.example/further/b:1")
		return runtimetest.Store{
			Backend: runtimetest.Backend{
				Runtime:      rt,
				CreateRecord: func(_ *testing.T, img runtime.Image) { rt.Create(img) },
				Targets:      [2]ocispec.Descriptor{a.Target, b.Target},
				Archive:      func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil },
				Name:         "fake.example/further/imported:1",
			},
			DeleteBlob: func(_ *testing.T, d digest.Digest) { rt.DeleteBlob(d) },
			NoCRI:      func(*testing.T) runtime.Runtime { rt.SetNoCRI(true); return rt },
			Another:    func(*testing.T) runtime.Runtime { return rt },
		}
	})
}

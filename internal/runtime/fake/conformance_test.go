package fake_test

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
	runtimetest.Run(t, "fake.example/conformance/", func(t *testing.T) runtimetest.Backend {
		rt := fake.New()
		target := func(s string) ocispec.Descriptor {
			return ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString(s), Size: 1}
		}
		return runtimetest.Backend{
			Runtime:      rt,
			CreateRecord: func(_ *testing.T, img runtime.Image) { rt.Create(img) },
			Targets:      [2]ocispec.Descriptor{target("a"), target("b")},
			Archive:      archive,
			Name:         "fake.example/conformance/imported:1",
		}
	})
}

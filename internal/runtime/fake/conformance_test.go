package fake_test

import (
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/runtime/runtimetest"
)

// TestConformance: the fake behaves as the suite says every runtime must, so
// the agent's unit tests over it stand for a real store.
func TestConformance(t *testing.T) {
	runtimetest.Run(t, "fake.example/conformance/", func(t *testing.T) runtimetest.Backend {
		rt := fake.New()
		target := func(s string) ocispec.Descriptor {
			return ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString(s), Size: 1}
		}
		return runtimetest.Backend{
			Runtime:      rt,
			CreateRecord: func(_ *testing.T, img runtime.Image) { rt.Create(img) },
			Targets:      [2]ocispec.Descriptor{target("a"), target("b")},
		}
	})
}

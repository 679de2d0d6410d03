package archive

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// mixedHaulImages are four images a registry may serve side by side, so a
// haul holds them side by side: a Docker schema 2 manifest (Docker config),
// an OCI manifest, a Docker manifest list and an OCI index, each of content
// of its own.
func mixedHaulImages(t *testing.T) []*fixture.Image {
	t.Helper()
	two := []fixture.Platform{fixture.HostPlatform(), {OS: "linux", Architecture: "s390x"}}
	var out []*fixture.Image
	for i, spec := range []fixture.ImageSpec{
		{Names: []string{"nginx:1.25"}, DockerMediaTypes: true, LayerCompression: fixture.Gzip},
		{Names: []string{"registry.example.com/mixed/oci:1"}},
		{Names: []string{"registry.example.com/mixed/list:2"}, DockerMediaTypes: true, Platforms: two},
		{Names: []string{"registry.example.com/mixed/index:3"}, Platforms: two, LayerCompression: fixture.Zstd},
	} {
		spec.Labels = map[string]string{"name": spec.Names[0]}
		spec.Layers = fixture.UniformLayers(1, 4<<10, false, int64(60+i))
		img, err := fixture.Build(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, img)
	}
	return out
}

// TestHaulMixedMediaTypes: a haul whose index.json mixes Docker and OCI
// media types (a manifest and a list or index of each) gives every image
// under its own name, at its own target, with the target's media type as
// the haul has it, whatever the order of the entries and whether the haul
// was saved for containerd; the signatures that carry the same names are
// skipped.
func TestHaulMixedMediaTypes(t *testing.T) {
	imgs := mixedHaulImages(t)
	want := []string{
		fmt.Sprintf("docker.io/library/nginx:1.25 %s %s", imgs[0].Target.Digest, fixture.MediaTypeDockerManifest),
		fmt.Sprintf("registry.example.com/mixed/index:3 %s %s", imgs[3].Target.Digest, ocispec.MediaTypeImageIndex),
		fmt.Sprintf("registry.example.com/mixed/list:2 %s %s", imgs[2].Target.Digest, fixture.MediaTypeDockerManifestList),
		fmt.Sprintf("registry.example.com/mixed/oci:1 %s %s", imgs[1].Target.Digest, ocispec.MediaTypeImageManifest),
	}
	reversed := slices.Clone(imgs)
	slices.Reverse(reversed)
	for _, tc := range []struct {
		name string
		opts fixture.HaulOptions
		imgs []*fixture.Image
	}{
		{"docker first", fixture.HaulOptions{Signatures: true}, imgs},
		{"oci first", fixture.HaulOptions{Signatures: true}, reversed},
		{"containerd", fixture.HaulOptions{Containerd: true, Signatures: true, SignaturesFirst: true}, imgs},
		{"legacy kinds", fixture.HaulOptions{LegacyKinds: true, Signatures: true}, reversed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, _, err := walkBytes(t, fixture.Zstd, func(w *bytes.Buffer) error {
				return fixture.WriteHaul(context.Background(), w, tc.opts, tc.imgs...)
			}, WalkOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Format != FormatHaul {
				t.Errorf("format %s, want %s", res.Format, FormatHaul)
			}
			var got []string
			for _, img := range res.Images {
				got = append(got, fmt.Sprintf("%s %s %s", img.Name, img.Target.Digest, img.Target.MediaType))
			}
			if !slices.Equal(got, want) {
				t.Errorf("images:\n%q\nwant:\n%q", got, want)
			}
			if got := reasons(res); !mapsEqual(got, map[string]int{"signature": 4, "attestation": 4}) {
				t.Errorf("skipped %v, want 4 signatures and 4 attestations", got)
			}
			// Each image's config is among the documents: the CRI's image
			// ID of each name is its own.
			for _, img := range imgs {
				if _, ok := res.Docs[img.ID()]; !ok {
					t.Errorf("the config %s of %v is not among the walk's documents", img.ID(), img.Names)
				}
			}
		})
	}
}

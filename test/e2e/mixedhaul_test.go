package e2e

import (
	"context"
	"io"
	"path/filepath"
	"slices"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// mixedImage is one image of a mixed haul, by the name the kubelet asks for.
type mixedImage struct {
	name string
	img  *fixture.Image
}

// mixedHaulImages are a Docker schema 2 manifest (Docker config, gzip
// layers), an OCI manifest, a Docker manifest list and an OCI index, each
// of content of its own, named under prefix; the first one under a Docker
// Hub name, which the haul spells index.docker.io/library/….
func mixedHaulImages(t *testing.T, prefix string) []mixedImage {
	t.Helper()
	two := []fixture.Platform{fixture.HostPlatform(), {OS: "linux", Architecture: "s390x"}}
	var out []mixedImage
	for _, c := range []struct {
		name, full string
		spec       fixture.ImageSpec
	}{
		{prefix + "-docker:1", "docker.io/library/" + prefix + "-docker:1", fixture.ImageSpec{DockerMediaTypes: true, LayerCompression: fixture.Gzip}},
		{"e2e.local/mixed/" + prefix + "-oci:1", "", fixture.ImageSpec{}},
		{"e2e.local/mixed/" + prefix + "-list:1", "", fixture.ImageSpec{DockerMediaTypes: true, Platforms: two}},
		{"e2e.local/mixed/" + prefix + "-index:1", "", fixture.ImageSpec{Platforms: two}},
	} {
		c.spec.Names = []string{c.name}
		c.spec.Labels = map[string]string{"name": c.name}
		if c.full == "" {
			c.full = c.name
		}
		out = append(out, mixedImage{name: c.full, img: build(t, c.spec)})
	}
	return out
}

// TestMixedMediaTypeHaul: a haul whose index.json mixes Docker and OCI media
// types (a Docker manifest, an OCI manifest, a Docker manifest list, an OCI
// index, with their signatures under the same names) brings every image
// under its own name, at its own target with the target's media type,
// pinned, with its repo@digest name, and the CRI gives each name the image
// ID of its own config: nothing is missing and no name points at another
// image. So for a haul synced from an images dir and for one saved for
// containerd (no oci-layout, hauler 1.x kinds, signatures first) given to
// holdfast import.
func TestMixedMediaTypeHaul(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		synced, imported := mixedHaulImages(t, "sync"), mixedHaulImages(t, "import")
		fixtures := func(ms []mixedImage) []*fixture.Image {
			var out []*fixture.Image
			for _, m := range ms {
				out = append(out, m.img)
			}
			return out
		}
		haul := filepath.Join(imagesDir, "haul.tar.zst")
		writeArchive(t, haul, fixture.Zstd, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
			return fixture.WriteHaul(ctx, w, fixture.HaulOptions{Signatures: true, Referrers: true}, fixtures(synced)...)
		})
		saved := filepath.Join(dir, "drop", "containerd-haul.tar.zst")
		writeArchive(t, saved, fixture.Zstd, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
			return fixture.WriteHaul(ctx, w, fixture.HaulOptions{Containerd: true, LegacyKinds: true, Signatures: true, SignaturesFirst: true},
				fixtures(imported)...)
		})
		if c := d.syncOK(t, dataDir, imagesDir); c["imported"] != 1 {
			t.Errorf("sync of the haul: %v, want 1 imported", c)
		}
		d.keepImportOK(t, dataDir, saved)

		all := append(slices.Clone(synced), imported...)
		want := map[string]digest.Digest{}
		seen := map[digest.Digest]string{}
		for _, m := range all {
			if other, dup := seen[m.img.Target.Digest]; dup {
				t.Fatalf("%s and %s are the same image: the test needs each its own", m.name, other)
			}
			seen[m.img.Target.Digest] = m.name
			want[m.name] = m.img.Target.Digest
		}
		mediaTypes := map[string]bool{}
		for _, m := range all {
			mediaTypes[m.img.Target.MediaType] = true
			repo := m.name[:len(m.name)-len(":1")]
			byDigest := repo + "@" + m.img.Target.Digest.String()
			for _, n := range []string{m.name, byDigest} {
				rec, ok := d.record(t, n)
				if !ok {
					t.Errorf("no record %s", n)
					continue
				}
				if rec.Target.Digest != m.img.Target.Digest || rec.Target.MediaType != m.img.Target.MediaType {
					t.Errorf("%s: record at %s (%s), want %s (%s)", n, rec.Target.Digest, rec.Target.MediaType, m.img.Target.Digest, m.img.Target.MediaType)
				}
				d.requirePinned(t, n)
				wantID := m.img.ID().String()
				var got criInspect
				eventually(t, "the CRI to know "+n, func() bool {
					var found bool
					got, found = d.inspecti(t, n)
					return found
				})
				if got.ID != wantID {
					t.Errorf("crictl inspecti %s: image ID %s, want %s (its own config)", n, got.ID, wantID)
				}
				if !slices.Contains(got.RepoTags, m.name) || !slices.Contains(got.RepoDigests, byDigest) {
					t.Errorf("crictl inspecti %s: repo tags %v, repo digests %v; want %s and %s among them", n, got.RepoTags, got.RepoDigests, m.name, byDigest)
				}
				if !d.Old && !got.Pinned {
					t.Errorf("crictl inspecti %s: not pinned", n) // containerd 1.6.20's CRI never reports pins
				}
			}
		}
		for _, mt := range []string{fixture.MediaTypeDockerManifest, fixture.MediaTypeDockerManifestList, ocispec.MediaTypeImageManifest, ocispec.MediaTypeImageIndex} {
			if !mediaTypes[mt] {
				t.Errorf("no image of media type %s in the hauls", mt)
			}
		}
		// Nothing else is pinned: no signature, referrer or attestation
		// under an image's name, no other name.
		d.requireBundleRecords(t, bundleSet{images: want})
	})
}

package e2e

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// source is one archive or directory the test writes, and the images it holds.
type source struct {
	path   string
	names  []string
	shared bool // holds the shared layer
}

// TestImportFormats imports every archive format and compression holdfast
// reads, written by several writers, some sharing a layer, and checks each image
// is pinned for containerd and the CRI, and held by its source's lease. It
// runs on both write paths; on the direct one, every source whose blobs were
// not in the store before had blobs written directly.
func TestImportFormats(t *testing.T) {
	forEachLineAndPath(t, func(t *testing.T, d *daemon, wp string) {
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		shared := sharedLayer(t, 42)
		var sources []source
		add := func(rel string, names []string, isShared bool) string {
			p := filepath.Join(imagesDir, rel)
			sources = append(sources, source{path: p, names: names, shared: isShared})
			return p
		}
		img := func(name string, isShared bool, mods ...func(*fixture.ImageSpec)) *fixture.Image {
			spec := fixture.ImageSpec{Names: []string{name}}
			if isShared {
				spec.SharedLayers = []*fixture.Layer{shared}
			}
			for _, m := range mods {
				m(&spec)
			}
			return build(t, spec)
		}

		// The project's generator: three tar formats in every compression.
		formats := []struct {
			name  string
			write func(context.Context, io.Writer, *fixture.Image) error
		}{
			{"docker-save", func(ctx context.Context, w io.Writer, im *fixture.Image) error {
				return fixture.WriteDockerSave(ctx, w, im)
			}},
			{"hybrid", func(ctx context.Context, w io.Writer, im *fixture.Image) error {
				return fixture.WriteHybrid(ctx, w, im)
			}},
			{"oci", func(ctx context.Context, w io.Writer, im *fixture.Image) error {
				return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerdAndTag}, im)
			}},
		}
		var bigWindow string
		for _, f := range formats {
			for _, c := range fixture.Compressions() {
				name := fmt.Sprintf("e2e.local/%s/%s:1", f.name, c)
				im := img(name, true)
				opts := fixture.CompressOptions{}
				if c == fixture.Zstd {
					opts.ZstdWindow = 64 << 20 // a window over 32 MiB, as the zstd CLI writes for big archives
				}
				p := add(fmt.Sprintf("%s/%s.tar%s", f.name, c, c.Extension()), []string{name}, true)
				writeArchive(t, p, c, opts, func(ctx context.Context, w io.Writer) error { return f.write(ctx, w, im) })
				if c == fixture.Zstd && f.name == "oci" {
					bigWindow = p
				}
			}
		}
		if w := zstdWindow(t, bigWindow); w <= 32<<20 {
			t.Fatalf("zstd fixture declares a %d-byte window, want > 32 MiB", w)
		}
		// OCI with the full name in org.opencontainers.image.ref.name, index.json last.
		full := img("e2e.local/oci/fullref:2", false)
		writeArchive(t, add("ocifull.tar", full.Names, false), fixture.None, fixture.CompressOptions{},
			func(ctx context.Context, w io.Writer) error {
				return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameOCIFull, IndexLast: true}, full)
			})
		// An OCI layout directory.
		ocidir := img("e2e.local/oci/dir:1", true)
		if err := fixture.WriteOCIDir(context.Background(), add("layouts/app", ocidir.Names, true), fixture.OCIOptions{Names: fixture.NameContainerd}, ocidir); err != nil {
			t.Fatal(err)
		}
		// A partial multi-platform image: the index lists arm64 but only the host's blobs are there.
		other := fixture.Platform{OS: "linux", Architecture: "arm64"}
		if fixture.HostPlatform().Architecture == "arm64" {
			other = fixture.Platform{OS: "linux", Architecture: "amd64"}
		}
		partial := img("e2e.local/multi/partial:1", false, func(s *fixture.ImageSpec) {
			s.Platforms = []fixture.Platform{fixture.HostPlatform(), other}
			s.OmitPlatforms = []fixture.Platform{other}
		})
		writeArchive(t, add("multi/partial.tar.gz", partial.Names, false), fixture.Gzip, fixture.CompressOptions{},
			func(ctx context.Context, w io.Writer) error {
				return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerdAndTag}, partial)
			})
		// go-containerregistry's writers.
		gt := img("e2e.local/ggcr/tarball:1", true)
		writeArchive(t, add("ggcr/tarball.tar", gt.Names, true), fixture.None, fixture.CompressOptions{},
			func(ctx context.Context, w io.Writer) error { return fixture.WriteGGCRTarball(ctx, w, gt) })
		gl := img("e2e.local/ggcr/layout:1", false)
		if err := fixture.WriteGGCRLayout(context.Background(), add("ggcr/layout", gl.Names, false), gl); err != nil {
			t.Fatal(err)
		}
		// containerd's own archive.Export.
		ce := img("e2e.local/containerd/export:1", true)
		exportWithContainerd(t, d, add("containerd-export.tar", ce.Names, true), ce)

		// A record that exists before the import, with labels of others on it.
		preName := "e2e.local/oci/none:1"
		if _, err := d.Client.ImageService().Create(d.ctx(), images.Image{
			Name:   preName,
			Target: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("an older target"), Size: 15},
			Labels: map[string]string{"team": "x", "io.cri-containerd.image": "managed"},
		}); err != nil {
			t.Fatal(err)
		}

		res := d.wpSync(t, wp, filepath.Join(dir, "data"), imagesDir)
		if res.Code != 0 {
			t.Fatalf("sync exited %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
		}
		// containerd's export left its blobs' files in the store (committed
		// in another namespace): that source's import commits them by
		// metadata and writes none.
		var fresh []string
		for _, s := range sources {
			if !strings.HasSuffix(s.path, "containerd-export.tar") {
				fresh = append(fresh, s.path)
			}
		}
		wpRequirePlaced(t, wp, res.Stderr, fresh...)
		if want := fmt.Sprintf("%d imported", len(sources)); !strings.Contains(res.Stdout, want) {
			t.Errorf("summary %q does not say %q", res.Stdout, want)
		}

		for _, s := range sources {
			lease, ok := d.leaseOf(t, s.path)
			if !ok {
				t.Errorf("%s: no holdfast lease", s.path)
				continue
			}
			if exp, ok := lease.Labels["containerd.io/gc.expire"]; ok {
				t.Errorf("%s: lease %s expires (%s)", s.path, lease.ID, exp)
			}
			held := d.leaseContent(t, lease)
			for _, name := range s.names {
				rec, ok := d.record(t, name)
				if !ok {
					t.Errorf("%s: no record %s", s.path, name)
					continue
				}
				if rec.Labels["io.cri-containerd.pinned"] != "pinned" || rec.Labels["io.holdfast.pinned"] != "pinned" {
					t.Errorf("%s: labels %v lack a pin", name, rec.Labels)
				}
				blobs := d.hostBlobs(t, rec.Target)
				if len(blobs) < 3 {
					t.Errorf("%s: host platform has %d blobs, want manifest, config and layers", name, len(blobs))
				}
				for _, b := range blobs {
					if !held[b.Digest] {
						t.Errorf("%s: lease %s does not hold %s %s", name, lease.ID, b.MediaType, b.Digest)
					}
				}
				if s.shared && !held[shared.Digest()] && !held[shared.DiffID()] {
					t.Errorf("%s: lease %s does not hold the shared layer", name, lease.ID)
				}
				if !d.Old {
					eventually(t, "CRI reports "+name+" pinned", func() bool {
						found, pinned := d.criImage(t, name)
						return found && pinned
					})
				}
			}
		}
		pre, _ := d.record(t, preName)
		if pre.Labels["team"] != "x" || pre.Labels["io.cri-containerd.image"] != "managed" {
			t.Errorf("labels of %s lost others' keys: %v", preName, pre.Labels)
		}
		if pre.Target.Digest == digest.FromString("an older target") {
			t.Errorf("%s still points at its old target", preName)
		}
		if refs := d.ingests(t); len(refs) != 0 {
			t.Errorf("ingests left: %v", refs)
		}
	})
}

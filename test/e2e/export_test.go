package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/oci"
)

// TestExport: images imported into one containerd (one of two platforms
// of which the node holds its own only, one sharing a layer with it, one
// signed with its signature carried) are exported by pattern; into a fresh
// containerd, holdfast import under a policy that requires the signature
// takes the file, names every name at the same digest and pins it, and
// ctr images import and K3s's importer name them the same, and a docker
// save reader takes each tag at its host platform's config; the file is seekable zstd (frames
// and a seek table that adds up), and exporting again gives the same
// bytes. An image whose layer is gone from the store is an error naming
// both, and leaves no file.
func TestExport(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	src := startEmbedded(t)
	dir := tempDir(t)
	other := fixture.Platform{OS: "linux", Architecture: "arm64"}
	if fixture.HostPlatform().Architecture == "arm64" {
		other = fixture.Platform{OS: "linux", Architecture: "amd64"}
	}
	shared := sharedLayer(t, 77)
	// Big enough for several 4 MiB frames.
	multi := build(t, fixture.ImageSpec{Names: []string{"e2e.local/export/multi:1"}, Platforms: []fixture.Platform{fixture.HostPlatform(), other},
		OmitPlatforms: []fixture.Platform{other}, SharedLayers: []*fixture.Layer{shared}, Layers: fixture.UniformLayers(2, 3<<20, false, 71)})
	single := build(t, fixture.ImageSpec{Names: []string{"e2e.local/export/single:2"}, SharedLayers: []*fixture.Layer{shared},
		Layers: fixture.UniformLayers(1, 2<<20, true, 72)})
	archive := filepath.Join(dir, "in", "images.tar.gz")
	writeArchive(t, archive, fixture.Gzip, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerdAndTag}, multi, single)
	})
	signed := writeSignedScene(t, filepath.Join(dir, "signed"))
	pol := signed.writePolicy(t, "enforce")
	srcData := filepath.Join(dir, "src-data")
	for _, a := range []string{archive, signed.archive} {
		if res := holdfast(t, "import", "--address", src.Address, "--data-dir", srcData, a); res.Code != 0 {
			t.Fatalf("import %s exited %d\n%s\n%s", a, res.Code, res.Stdout, res.Stderr)
		}
	}
	// What the export must carry: every name the patterns match, at its
	// target in the source containerd.
	want := map[string]digest.Digest{}
	for _, n := range src.recordNames(t) {
		if strings.HasPrefix(n, "e2e.local/export/") || strings.HasPrefix(n, signed.signed) || strings.HasPrefix(n, strings.TrimSuffix(signed.signed, ":1")+"@") {
			rec, _ := src.record(t, n)
			want[n] = rec.Target.Digest
		}
	}
	if len(want) != 6 {
		t.Fatalf("the source containerd holds %v; want three images with their digest names", want)
	}

	out := filepath.Join(dir, "out", "node.tar.zst")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	// The signed image by its repository: its tag and its digest name.
	exportArgs := []string{"export", "--address", src.Address, "--data-dir", srcData, "e2e.local/export/*", strings.TrimSuffix(signed.signed, ":1")}
	res := holdfast(t, append(exportArgs, "-o", out)...)
	if res.Code != 0 || !strings.Contains(res.Stderr, "exported 3 images (6 names), 1 signature, ") {
		t.Fatalf("export exited %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	file, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(out)); len(entries) != 1 {
		t.Errorf("the output dir holds %d entries; want the file alone", len(entries))
	}
	again := holdfast(t, append(exportArgs, "-o", "-")...)
	if again.Code != 0 || again.Stdout != string(file) {
		t.Errorf("exporting the same images again to standard output gave %d bytes (exit %d), the file has %d", len(again.Stdout), again.Code, len(file))
	}
	checkSeekable(t, file)
	checkLayoutTar(t, file, signed.signed)

	t.Run("holdfast-import", func(t *testing.T) {
		t.Parallel()
		dst := startEmbedded(t)
		res := holdfast(t, "import", "--address", dst.Address, "--data-dir", filepath.Join(tempDir(t), "data"), "--policy", pol, out)
		if res.Code != 0 || !strings.Contains(res.Stdout, signed.signed+": signature: verified by "+filepath.Join(signed.policyDir, "platform.pub")) {
			t.Fatalf("import under enforce exited %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
		}
		for n, d := range want {
			rec, ok := dst.record(t, n)
			if !ok || rec.Target.Digest != d {
				t.Errorf("%s: record %v at %s; want %s", n, ok, rec.Target.Digest, d)
			}
			dst.requirePinned(t, n)
		}
	})
	t.Run("ctr-import", func(t *testing.T) {
		t.Parallel()
		dst := startEmbedded(t)
		dst.ctr(t, "-n", namespace, "images", "import", out)
		got := map[string]digest.Digest{}
		for _, n := range dst.recordNames(t) {
			if strings.HasPrefix(n, "sha256:") {
				continue
			}
			rec, _ := dst.record(t, n)
			got[n] = rec.Target.Digest
		}
		sigTag := strings.TrimSuffix(signed.signed, ":1") + ":" + oci.SignatureTag(want[signed.signed])
		for n, d := range want {
			if got[n] != d {
				t.Errorf("%s: ctr made it at %q; want %s", n, got[n], d)
			}
		}
		for n := range got {
			if _, ok := want[n]; !ok && n != sigTag {
				t.Errorf("ctr made a record %s the export does not name as an image", n)
			}
		}
	})

	t.Run("k3s-import", func(t *testing.T) {
		// K3s's importer: containerd's client import of every platform,
		// skipping what the file lacks, on the decoded stream.
		t.Parallel()
		dst := startEmbedded(t)
		imgs, err := dst.Client.Import(dst.ctx(), bytes.NewReader(decodeZstd(t, file)), containerd.WithAllPlatforms(true), containerd.WithSkipMissing())
		if err != nil {
			t.Fatalf("importing as K3s does: %v", err)
		}
		got := map[string]digest.Digest{}
		for _, img := range imgs {
			got[img.Name] = img.Target.Digest
		}
		for n, d := range want {
			if got[n] != d {
				t.Errorf("%s: imported at %q; want %s", n, got[n], d)
			}
		}
	})
	t.Run("docker-save-reader", func(t *testing.T) {
		// go-containerregistry's docker save reader takes manifest.json:
		// each tag is the image whose config the host platform's manifest
		// names.
		t.Parallel()
		tarFile := decodeZstd(t, file)
		opener := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(tarFile)), nil }
		for tag, img := range map[string]*fixture.Image{"e2e.local/export/multi:1": multi, "e2e.local/export/single:2": single} {
			ref, err := name.NewTag(tag)
			if err != nil {
				t.Fatal(err)
			}
			read, err := tarball.Image(opener, &ref)
			if err != nil {
				t.Fatalf("reading %s from manifest.json: %v", tag, err)
			}
			cfg, err := read.ConfigName()
			if want := img.ManifestFor(fixture.HostPlatform()).Config.Digest.String(); err != nil || cfg.String() != want {
				t.Errorf("%s: config %s (%v); want the host platform's %s", tag, cfg, err, want)
			}
			if layers, err := read.Layers(); err != nil || len(layers) != len(img.ManifestFor(fixture.HostPlatform()).Layers) {
				t.Errorf("%s: %d layers (%v)", tag, len(layers), err)
			}
		}
	})
	t.Run("missing-layer", func(t *testing.T) {
		layer := single.ManifestFor(fixture.HostPlatform()).Layers[1].Digest()
		src.ctr(t, "-n", namespace, "content", "rm", layer.String())
		lost := filepath.Join(dir, "lost", "lost.tar.zst")
		if err := os.MkdirAll(filepath.Dir(lost), 0o755); err != nil {
			t.Fatal(err)
		}
		res := holdfast(t, "export", "--address", src.Address, "--data-dir", srcData, "e2e.local/export/single", "-o", lost)
		if res.Code != 1 || !strings.Contains(res.Stderr, "e2e.local/export/single:2") || !strings.Contains(res.Stderr, layer.String()) {
			t.Errorf("export of an image without its layer exited %d; want 1 naming the image and %s\n%s", res.Code, layer, res.Stderr)
		}
		if entries, _ := os.ReadDir(filepath.Dir(lost)); len(entries) != 0 {
			t.Errorf("a failed export left %d entries", len(entries))
		}
	})
}

// checkSeekable reads the seek table at the end of file (zstd's seekable
// format: a skippable frame whose footer ends with 0x8F92EAB1) and checks
// it: more than one frame, their compressed sizes add up to what precedes
// the table, and their content to the tar a plain zstd decoder reads.
func checkSeekable(t *testing.T, file []byte) {
	t.Helper()
	n := len(file)
	if n < 17 || binary.LittleEndian.Uint32(file[n-4:]) != 0x8F92EAB1 {
		t.Fatalf("the file does not end with the seekable format's magic")
	}
	frames := int(binary.LittleEndian.Uint32(file[n-9:]))
	desc := file[n-5]
	entry := 8
	if desc&0x80 != 0 {
		entry = 12
	}
	tableSize := frames*entry + 9
	start := n - tableSize - 8
	if frames < 2 || start < 0 || binary.LittleEndian.Uint32(file[start:]) != 0x184D2A5E || int(binary.LittleEndian.Uint32(file[start+4:])) != tableSize {
		t.Fatalf("seek table: %d frames, descriptor %#x, %d bytes: not a skippable frame of that size at %d", frames, desc, tableSize, start)
	}
	var comp, content int64
	for i := range frames {
		e := file[start+8+i*entry:]
		comp += int64(binary.LittleEndian.Uint32(e))
		content += int64(binary.LittleEndian.Uint32(e[4:]))
	}
	tarBytes := decodeZstd(t, file)
	if comp != int64(start) || content != int64(len(tarBytes)) {
		t.Errorf("seek table: %d compressed bytes before a table at %d; %d content bytes, the tar has %d", comp, start, content, len(tarBytes))
	}
}

func decodeZstd(t *testing.T, file []byte) []byte {
	t.Helper()
	zr, err := zstd.NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("decoding the export as one zstd stream: %v", err)
	}
	return b
}

// checkLayoutTar checks the tar's first entries and that it holds the
// signature of the signed image, tagged in its repository.
func checkLayoutTar(t *testing.T, file []byte, signedName string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(decodeZstd(t, file)))
	var names []string
	var index []byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == "index.json" {
			index, _ = io.ReadAll(tr)
		}
	}
	if len(names) < 3 || !slices.Equal(names[:3], []string{"oci-layout", "index.json", "manifest.json"}) {
		t.Errorf("entries begin %v", names[:min(len(names), 5)])
	}
	repo := strings.TrimSuffix(signedName, ":1")
	if !bytes.Contains(index, []byte(`"io.containerd.image.name":"`+repo+`:sha256-`)) {
		t.Errorf("index.json names no signature tag of %s:\n%s", repo, index)
	}
}

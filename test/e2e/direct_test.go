package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// TestDirectWritePathImportsEveryFormat imports archives of each format with
// --write-path=direct and checks the images are pinned and leased, their
// content reads back with the right digests, each archive's blobs were
// placed directly, and a temp file a crash left is gone after the pass.
func TestDirectWritePathImportsEveryFormat(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		root := directContentRoot(t, d)
		if err := os.MkdirAll(filepath.Join(root, "holdfast-tmp"), 0o700); err != nil {
			t.Fatal(err)
		}
		crashed := filepath.Join(root, "holdfast-tmp", "blob-crashed")
		if err := os.WriteFile(crashed, []byte("half a blob"), 0o600); err != nil {
			t.Fatal(err)
		}

		type src struct {
			path string
			img  *fixture.Image
		}
		var srcs []src
		add := func(name, file string, c fixture.Compression, write func(context.Context, io.Writer, *fixture.Image) error) {
			im := build(t, fixture.ImageSpec{Names: []string{name}})
			p := filepath.Join(imagesDir, file+c.Extension())
			writeArchive(t, p, c, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error { return write(ctx, w, im) })
			srcs = append(srcs, src{p, im})
		}
		for _, c := range []fixture.Compression{fixture.None, fixture.Gzip} {
			add(fmt.Sprintf("e2e.local/direct/docker-%s:1", c), fmt.Sprintf("docker-%s.tar", c), c, func(ctx context.Context, w io.Writer, im *fixture.Image) error {
				return fixture.WriteDockerSave(ctx, w, im)
			})
			add(fmt.Sprintf("e2e.local/direct/hybrid-%s:1", c), fmt.Sprintf("hybrid-%s.tar", c), c, func(ctx context.Context, w io.Writer, im *fixture.Image) error {
				return fixture.WriteHybrid(ctx, w, im)
			})
			add(fmt.Sprintf("e2e.local/direct/oci-%s:1", c), fmt.Sprintf("oci-%s.tar", c), c, func(ctx context.Context, w io.Writer, im *fixture.Image) error {
				return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerdAndTag}, im)
			})
		}
		layout := build(t, fixture.ImageSpec{Names: []string{"e2e.local/direct/layout:1"}})
		layoutPath := filepath.Join(imagesDir, "layouts", "app")
		if err := fixture.WriteOCIDir(context.Background(), layoutPath, fixture.OCIOptions{Names: fixture.NameContainerd}, layout); err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, src{layoutPath, layout})

		res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir,
			"--write-path=direct", "--log-level=debug")
		if res.Code != 0 {
			t.Fatalf("sync exited %d\nstderr:\n%s", res.Code, res.Stderr)
		}
		if !strings.Contains(res.Stderr, `"msg":"imports write blobs directly into the content store"`) {
			t.Errorf("no line says imports write directly:\n%s", res.Stderr)
		}
		placed := directPlaced(t, res.Stderr)
		cs := d.Client.ContentStore()
		for _, s := range srcs {
			name := s.img.Names[0]
			d.requirePinned(t, name)
			if placed[s.path] == 0 {
				t.Errorf("%s: no blob was written directly", s.path)
			}
			rec, ok := d.record(t, name)
			if !ok {
				t.Errorf("%s: no record", name)
				continue
			}
			l, ok := d.leaseOf(t, s.path)
			if !ok {
				t.Errorf("%s: no lease", s.path)
				continue
			}
			held := d.leaseContent(t, l)
			for _, b := range d.hostBlobs(t, rec.Target) {
				if !held[b.Digest] {
					t.Errorf("%s: lease does not hold %s", s.path, b.Digest)
				}
				data, err := content.ReadBlob(d.ctx(), cs, b)
				if err != nil {
					t.Errorf("%s: reading %s: %v", s.path, b.Digest, err)
					continue
				}
				if got := digest.FromBytes(data); got != b.Digest || int64(len(data)) != b.Size {
					t.Errorf("%s: blob %s reads back as %s, %d bytes (want %d)", s.path, b.Digest, got, len(data), b.Size)
				}
			}
		}
		if _, err := os.Stat(crashed); !os.IsNotExist(err) {
			t.Errorf("the temp file a crash left is still there (stat: %v)", err)
		}
		if refs := d.ingests(t); len(refs) != 0 {
			t.Errorf("ingests left: %v", refs)
		}
	})
}

// TestDirectWritePathRefusesTamperedLayer: a layer whose bytes do not match
// the digest its OCI archive names is refused, and no file is left under
// either digest's name in the store's directory.
func TestDirectWritePathRefusesTamperedLayer(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		root := directContentRoot(t, d)
		im := build(t, fixture.ImageSpec{Names: []string{"e2e.local/direct/tampered:1"},
			Layers: fixture.UniformLayers(2, 256<<10, false, 4711)})
		layer := im.Manifests[0].Layers[1].Digest()
		var buf bytes.Buffer
		if err := fixture.WriteOCI(context.Background(), &buf, fixture.OCIOptions{Names: fixture.NameContainerd}, im); err != nil {
			t.Fatal(err)
		}
		tampered, swapped := gapTamper(t, buf.Bytes(), "blobs/sha256/"+layer.Encoded())
		if err := os.MkdirAll(imagesDir, 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(imagesDir, "bad.tar")
		if err := os.WriteFile(path, tampered, 0o644); err != nil {
			t.Fatal(err)
		}
		res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--write-path=direct")
		if res.Code != 1 || !strings.Contains(res.Stderr, "error: import "+path+":") || !strings.Contains(res.Stderr, string(layer)) {
			t.Fatalf("sync exited %d, want 1 with an error naming %s and %s\nstderr:\n%s", res.Code, path, layer, res.Stderr)
		}
		for _, dg := range []digest.Digest{layer, swapped} {
			if _, err := os.Stat(filepath.Join(root, "blobs", "sha256", dg.Encoded())); !os.IsNotExist(err) {
				t.Errorf("a file is left under %s (stat: %v)", dg, err)
			}
		}
		left, err := os.ReadDir(filepath.Join(root, "holdfast-tmp"))
		if err != nil {
			t.Fatal(err)
		}
		if len(left) != 0 {
			t.Errorf("temp files left: %v", left)
		}
		if _, ok := d.record(t, im.Names[0]); ok {
			t.Errorf("a record was made")
		}
	})
}

// TestDirectWritePathFallsBackToStreaming: given a --content-root that is
// not containerd's (an empty directory proves nothing either way: the probe
// blob containerd writes does not appear there), --write-path=auto streams
// every blob, says why, writes nothing into that directory, and the import
// succeeds with intact content.
func TestDirectWritePathFallsBackToStreaming(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	elsewhere := tempDir(t)
	im := build(t, fixture.ImageSpec{Names: []string{"e2e.local/direct/fallback:1"}})
	path := filepath.Join(imagesDir, "fallback.tar")
	writeArchive(t, path, fixture.Gzip, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerdAndTag}, im)
	})
	res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir,
		"--write-path=auto", "--content-root", elsewhere, "--log-level=debug")
	if res.Code != 0 {
		t.Fatalf("sync exited %d\nstderr:\n%s", res.Code, res.Stderr)
	}
	if !strings.Contains(res.Stderr, elsewhere+" is not containerd's content store") {
		t.Errorf("no line says why blobs are streamed:\n%s", res.Stderr)
	}
	if n := directPlaced(t, res.Stderr)[path]; n != 0 {
		t.Errorf("%d blobs counted as written directly", n)
	}
	if left, err := os.ReadDir(elsewhere); err != nil || len(left) != 0 {
		t.Errorf("holdfast wrote into %s: %v %v", elsewhere, left, err)
	}
	d.requirePinned(t, im.Names[0])
	rec, ok := d.record(t, im.Names[0])
	if !ok {
		t.Fatal("no record")
	}
	for _, b := range d.hostBlobs(t, rec.Target) {
		data, err := content.ReadBlob(d.ctx(), d.Client.ContentStore(), b)
		if err != nil {
			t.Fatalf("reading %s: %v", b.Digest, err)
		}
		if got := digest.FromBytes(data); got != b.Digest {
			t.Errorf("blob %s reads back as %s", b.Digest, got)
		}
	}
}

// directContentRoot asks d where its content store keeps blobs.
func directContentRoot(t *testing.T, d *daemon) string {
	t.Helper()
	resp, err := d.Client.IntrospectionService().Plugins(d.ctx(), "type==io.containerd.content.v1,id==content")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range resp.Plugins {
		if root := p.Exports["root"]; root != "" {
			return root
		}
	}
	t.Fatal("the content plugin exports no root")
	return ""
}

// directPlaced reads, from a JSON log, how many blobs each source had
// written directly: committed by metadata, or placed and then streamed
// because containerd's GC swept the file before its commit (a GC that runs
// while imports link blobs; the import is right to stream them).
func directPlaced(t *testing.T, log string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, line := range strings.Split(log, "\n") {
		var m struct {
			Msg        string `json:"msg"`
			Source     string `json:"source"`
			Blobs      int    `json:"blobs"`
			Restreamed int    `json:"restreamed"`
		}
		if json.Unmarshal([]byte(line), &m) != nil || m.Msg != "blobs written directly into the content store" {
			continue
		}
		out[m.Source] += m.Blobs + m.Restreamed
	}
	return out
}

// TestDirectWritePathSweepsWithoutImporting: a temp file a killed writer
// left is removed by the next pass even when that pass imports nothing (its
// archives unchanged), not only by a pass that writes a blob.
func TestDirectWritePathSweepsWithoutImporting(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	im := build(t, fixture.ImageSpec{Names: []string{"e2e.local/direct/sweep:1"}})
	writeArchive(t, filepath.Join(imagesDir, "sweep.tar"), fixture.None, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerdAndTag}, im)
	})
	sync := func() string {
		res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--write-path=direct", "--log-level=debug")
		if res.Code != 0 {
			t.Fatalf("sync exited %d\nstderr:\n%s", res.Code, res.Stderr)
		}
		return res.Stderr
	}
	sync()
	crashed := filepath.Join(directContentRoot(t, d), "holdfast-tmp", "blob-killed")
	if err := os.WriteFile(crashed, []byte("half a blob"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n := len(directPlaced(t, sync())); n != 0 {
		t.Fatalf("the second sync wrote blobs of %d sources: the archive was not unchanged", n)
	}
	if _, err := os.Stat(crashed); !os.IsNotExist(err) {
		t.Errorf("the killed writer's temp file is still there after a pass (stat: %v)", err)
	}
	d.requirePinned(t, im.Names[0])
}

// TestDirectWritePathIsTheDefault: without --write-path, an import into a
// containerd whose content store holdfast can reach writes its blobs
// directly, and the log says which path that containerd gets.
func TestDirectWritePathIsTheDefault(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		im := build(t, fixture.ImageSpec{Names: []string{"e2e.local/direct/default:1"}})
		path := filepath.Join(imagesDir, "default.tar")
		writeArchive(t, path, fixture.Gzip, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
			return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerdAndTag}, im)
		})
		res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--log-level=debug")
		if res.Code != 0 {
			t.Fatalf("sync exited %d\nstderr:\n%s", res.Code, res.Stderr)
		}
		if !strings.Contains(res.Stderr, `"msg":"imports write blobs directly into the content store","writePath":"auto"`) {
			t.Errorf("no line says imports write directly with the default auto:\n%s", res.Stderr)
		}
		if n := directPlaced(t, res.Stderr)[path]; n == 0 {
			t.Errorf("no blob of %s was written directly", path)
		}
		d.requirePinned(t, im.Names[0])
	})
}

// TestDirectWritePathLeftoversGoWithContainerdsGC: a blob file linked into
// the store by a holdfast killed before its commit is recorded in no
// namespace; containerd's next content GC (here: after a lease's content is
// released) removes it, and nothing of it reaches an image.
func TestDirectWritePathLeftoversGoWithContainerdsGC(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		root := directContentRoot(t, d)
		orphan := []byte("a verified blob whose commit never came")
		od := digest.FromBytes(orphan)
		placed := filepath.Join(root, "blobs", "sha256", od.Encoded())
		if err := os.MkdirAll(filepath.Dir(placed), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(placed, orphan, 0o444); err != nil {
			t.Fatal(err)
		}
		// Something else's content comes and goes: containerd collects.
		ctx := d.ctx()
		ls := d.Client.LeasesService()
		l, err := ls.Create(ctx, leases.WithRandomID())
		if err != nil {
			t.Fatal(err)
		}
		other := []byte("content released a moment later")
		if err := content.WriteBlob(leases.WithLease(ctx, l.ID), d.Client.ContentStore(), "e2e-gc-trigger", bytes.NewReader(other),
			ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(other), Size: int64(len(other))}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(placed); err != nil {
			t.Fatalf("the placed file went before any GC: %v", err)
		}
		if err := ls.Delete(ctx, l, leases.SynchronousDelete); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(placed); !os.IsNotExist(err) {
			t.Errorf("containerd's GC left the uncommitted blob file %s (stat: %v)", placed, err)
		}
		if _, err := d.Client.ContentStore().Info(ctx, od); err == nil {
			t.Errorf("the uncommitted blob %s is recorded in the namespace", od)
		}
	})
}

// TestDirectWritePathRefusesAForeignDirectory: a --content-root that is not
// containerd's content store directory is not written into at all, even
// when it holds copies of the blobs containerd records: with auto, imports
// stream, and the log says why, once; with direct, the import fails naming
// the cause.
func TestDirectWritePathRefusesAForeignDirectory(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	first := build(t, fixture.ImageSpec{Names: []string{"e2e.local/direct/foreign-a:1"}})
	writeDockerSave(t, filepath.Join(imagesDir, "a.tar"), first)
	if res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--write-path=stream"); res.Code != 0 {
		t.Fatalf("first sync exited %d\n%s", res.Code, res.Stderr)
	}
	// A directory that holds copies of every blob the namespace records.
	elsewhere := tempDir(t)
	store := filepath.Join(directContentRoot(t, d), "blobs", "sha256")
	copies := filepath.Join(elsewhere, "blobs", "sha256")
	if err := os.MkdirAll(copies, 0o755); err != nil {
		t.Fatal(err)
	}
	es, err := os.ReadDir(store)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		b, err := os.ReadFile(filepath.Join(store, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(copies, e.Name()), b, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	listing := func() []string {
		var names []string
		_ = filepath.WalkDir(elsewhere, func(p string, _ os.DirEntry, _ error) error {
			names = append(names, p)
			return nil
		})
		return names
	}
	before := listing()

	second := build(t, fixture.ImageSpec{Names: []string{"e2e.local/direct/foreign-b:1"}})
	writeDockerSave(t, filepath.Join(imagesDir, "b.tar"), second)
	res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--write-path=auto", "--content-root", elsewhere)
	if res.Code != 0 {
		t.Fatalf("sync exited %d\n%s", res.Code, res.Stderr)
	}
	if n := strings.Count(res.Stderr, "the content store's directory cannot be written directly"); n != 1 || !strings.Contains(res.Stderr, elsewhere+" is not containerd's content store") {
		t.Errorf("%d lines saying imports stream, want 1 naming the directory and the cause:\n%s", n, res.Stderr)
	}
	d.requirePinned(t, first.Names[0], second.Names[0])

	third := build(t, fixture.ImageSpec{Names: []string{"e2e.local/direct/foreign-c:1"}})
	archive := filepath.Join(tempDir(t), "c.tar")
	writeDockerSave(t, archive, third)
	res = holdfast(t, "import", "--address", d.Address, "--data-dir", dataDir, "--write-path=direct", "--content-root", elsewhere, archive)
	if res.Code != 1 || !strings.Contains(res.Stderr, "--write-path=direct: "+elsewhere+" is not containerd's content store") {
		t.Errorf("import --write-path=direct into a foreign directory exited %d, want 1 naming the cause:\n%s", res.Code, res.Stderr)
	}
	if after := listing(); !slices.Equal(before, after) {
		t.Errorf("holdfast wrote into the foreign directory: before %v, after %v", before, after)
	}
}

package e2e

import (
	"context"
	"encoding/binary"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/containerd/v2/core/images/archive"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/platforms"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// build makes a small image with the project's generator.
func build(t *testing.T, spec fixture.ImageSpec) *fixture.Image {
	t.Helper()
	if spec.Layers == nil {
		seed := int64(1)
		if len(spec.Names) > 0 {
			h := fnv.New64a()
			h.Write([]byte(spec.Names[0]))
			seed = int64(h.Sum64() >> 1)
		}
		spec.Layers = fixture.UniformLayers(2, 64<<10, false, seed)
	}
	img, err := fixture.Build(context.Background(), spec)
	if err != nil {
		t.Fatalf("building %v: %v", spec.Names, err)
	}
	return img
}

func sharedLayer(t *testing.T, seed int64) *fixture.Layer {
	t.Helper()
	l, err := fixture.NewLayer(context.Background(), fixture.LayerSpec{Size: 96 << 10, Seed: seed}, fixture.None)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// writeArchive writes an archive file compressed with c.
func writeArchive(t *testing.T, path string, c fixture.Compression, opts fixture.CompressOptions, write func(context.Context, io.Writer) error) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	err := fixture.WriteFileAtomic(path, func(w io.Writer) error {
		cw, err := fixture.Compress(w, c, opts)
		if err != nil {
			return err
		}
		if err := write(context.Background(), cw); err != nil {
			return err
		}
		return cw.Close()
	})
	if err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
}

// exportWithContainerd writes img as containerd's own archive.Export does: the
// image is imported into a scratch namespace of d, exported, then removed.
func exportWithContainerd(t *testing.T, d *daemon, path string, img *fixture.Image) {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), "holdfast-e2e-export")
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(fixture.WriteOCI(context.Background(), pw, fixture.OCIOptions{Names: fixture.NameContainerd}, img))
	}()
	imported, err := d.Client.Import(ctx, pr)
	pr.Close()
	if err != nil {
		t.Fatalf("importing into the export namespace: %v", err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	opts := []archive.ExportOpt{archive.WithPlatform(platforms.DefaultStrict())}
	for _, im := range imported {
		opts = append(opts, archive.WithImage(d.Client.ImageService(), im.Name))
	}
	if err := d.Client.Export(ctx, f, opts...); err != nil {
		t.Fatalf("exporting with containerd: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for _, im := range imported {
		if err := d.Client.ImageService().Delete(ctx, im.Name); err != nil {
			t.Fatal(err)
		}
	}
}

// zstdWindow reads the window size a zstd frame header declares.
func zstdWindow(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hdr := make([]byte, 6)
	if _, err := io.ReadFull(f, hdr); err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint32(hdr) != 0xFD2FB528 {
		t.Fatalf("%s: not a zstd frame", path)
	}
	fhd := hdr[4]
	if fhd&0x20 != 0 { // single segment: the window is the content size
		t.Fatalf("%s: single-segment frame declares no window", path)
	}
	wd := hdr[5]
	exp := int64(wd >> 3)
	base := int64(1) << (10 + exp)
	return base + base/8*int64(wd&7)
}

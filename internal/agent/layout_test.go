package agent

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/fixture"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
)

// imageDir writes an OCI layout dir at dir holding one small image per name,
// each of its own content, settled (its files an hour old), and returns
// what importing it wants: a real source, imported by the real import.
func imageDir(t *testing.T, dir string, names ...string) []hfruntime.Want {
	t.Helper()
	var imgs []*fixture.Image
	var wants []hfruntime.Want
	for _, n := range names {
		img := buildImage(t, n)
		imgs = append(imgs, img)
		wants = append(wants, hfruntime.Want{Name: n, Target: img.Target})
	}
	if err := fixture.WriteOCIDir(context.Background(), dir, fixture.OCIOptions{Names: fixture.NameContainerd}, imgs...); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	if err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(path, past, past)
	}); err != nil {
		t.Fatal(err)
	}
	return wants
}

// mkLayout makes an OCI layout dir holding one image, example.com/<base of dir>:1.
func mkLayout(t *testing.T, dir string) hfruntime.Want {
	t.Helper()
	return imageDir(t, dir, "example.com/"+filepath.Base(dir)+":1")[0]
}

// buildImage builds a small image named name, of its own content.
func buildImage(t *testing.T, name string) *fixture.Image {
	t.Helper()
	img, err := fixture.Build(context.Background(), fixture.ImageSpec{Names: []string{name}, Labels: map[string]string{"name": name},
		Layers: fixture.UniformLayers(1, 1<<10, false, 1)})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// storedImage puts the content of a small image named name in rt's store,
// as a pull by another client would, and returns its want; no record.
func storedImage(t *testing.T, rt *fake.Runtime, name string) hfruntime.Want {
	t.Helper()
	img := buildImage(t, name)
	content, err := img.Content(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rt.PutContent(content)
	return hfruntime.Want{Name: name, Target: img.Target}
}

// writeImageArchive writes an OCI archive at path holding one small image
// named name, settled (an hour old), and returns its size.
func writeImageArchive(t *testing.T, path, name string) int64 {
	t.Helper()
	var buf bytes.Buffer
	if err := fixture.WriteOCI(context.Background(), &buf, fixture.OCIOptions{Names: fixture.NameContainerd}, buildImage(t, name)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, past, past); err != nil {
		t.Fatal(err)
	}
	return int64(buf.Len())
}

// Package testimage makes small real images for the unit tests of passes and
// the agent, which the real import reads into the fake's store.
package testimage

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
)

// Build builds a small image named name, of its own content: the same
// name gives the same image.
func Build(t testing.TB, name string) *fixture.Image {
	t.Helper()
	img, err := fixture.Build(context.Background(), fixture.ImageSpec{Names: []string{name}, Labels: map[string]string{"name": name},
		Layers: fixture.UniformLayers(1, 1<<10, false, 1)})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// Dir writes an OCI layout dir at dir holding one small image per name,
// settled (its files an hour old), and returns what importing it wants.
func Dir(t testing.TB, dir string, names ...string) []runtime.Want {
	t.Helper()
	var imgs []*fixture.Image
	var wants []runtime.Want
	for _, n := range names {
		img := Build(t, n)
		imgs = append(imgs, img)
		wants = append(wants, runtime.Want{Name: n, Target: img.Target})
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

// Layout makes an OCI layout dir holding one image,
// example.com/<base of dir>:1, and returns its want.
func Layout(t testing.TB, dir string) runtime.Want {
	t.Helper()
	return Dir(t, dir, "example.com/"+filepath.Base(dir)+":1")[0]
}

// Archive writes an OCI archive at path holding one small image named
// name, settled (an hour old), and returns its size.
func Archive(t testing.TB, path, name string) int64 {
	t.Helper()
	var buf bytes.Buffer
	if err := fixture.WriteOCI(context.Background(), &buf, fixture.OCIOptions{Names: fixture.NameContainerd}, Build(t, name)); err != nil {
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

// Stored puts the content of a small image named name in rt's store,
// as a pull by another client would, and returns its want; no record.
func Stored(t testing.TB, rt *fake.Runtime, name string) runtime.Want {
	t.Helper()
	img := Build(t, name)
	content, err := img.Content(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rt.PutContent(content)
	return runtime.Want{Name: name, Target: img.Target}
}

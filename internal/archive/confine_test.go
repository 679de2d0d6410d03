package archive

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
)

// TestWalkDirConfined: a layout dir never makes the walk read outside it. A
// blob (or the blobs dir, or index.json) symlinked out of the dir is an error
// that says the path escapes; a symlink that stays inside is followed.
func TestWalkDirConfined(t *testing.T) {
	im := makeImage(t, "amd64", None, "bin/sh")
	idx := indexJSON(t, withAnnotations(im.manifest.desc(), annotationContainerdName, "docker.io/library/a:1"))
	layer := im.layers[0].digest().Encoded()
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, dir, outside string)
		ok      bool
	}{
		{"blob to a file outside", func(t *testing.T, dir, outside string) {
			relink(t, filepath.Join(outside, "blobs", "sha256", layer), filepath.Join(dir, "blobs", "sha256", layer))
		}, false},
		{"blob to /etc/shadow-like absolute path", func(t *testing.T, dir, outside string) {
			relink(t, "/etc/passwd", filepath.Join(dir, "blobs", "sha256", layer))
		}, false},
		{"blob by ../", func(t *testing.T, dir, outside string) {
			relink(t, "../../../outside/blobs/sha256/"+layer, filepath.Join(dir, "blobs", "sha256", layer))
		}, false},
		{"blobs dir outside", func(t *testing.T, dir, outside string) {
			relink(t, filepath.Join(outside, "blobs"), filepath.Join(dir, "blobs"))
		}, false},
		{"index.json outside", func(t *testing.T, dir, outside string) {
			relink(t, filepath.Join(outside, "index.json"), filepath.Join(dir, "index.json"))
		}, false},
		{"blob to a file inside", func(t *testing.T, dir, outside string) {
			p := filepath.Join(dir, "blobs", "sha256", layer)
			if err := os.Rename(p, filepath.Join(dir, "layer.tar")); err != nil {
				t.Fatal(err)
			}
			relink(t, "../../layer.tar", p)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir, outside := filepath.Join(root, "layout"), filepath.Join(root, "outside")
			writeLayout(t, dir, idx, im.blobs()...)
			writeLayout(t, outside, idx, im.blobs()...)
			tc.prepare(t, dir, outside)
			st := newMemStore()
			res, err := WalkDir(t.Context(), dir, st)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := res.Blobs[im.layers[0].digest()]; !ok {
					t.Fatalf("layer not read through a symlink inside the dir: %v", res.Blobs)
				}
				return
			}
			if err == nil {
				t.Fatalf("walk of a layout dir with a symlink out of it succeeded: %v", names(res))
			}
			if !strings.Contains(err.Error(), "escapes") {
				t.Fatalf("error does not say the path escapes the dir: %v", err)
			}
			if len(st.blobs) != 0 && tc.name != "index.json outside" {
				for d := range st.blobs {
					if d == im.layers[0].digest() {
						t.Fatalf("layer read from outside the dir")
					}
				}
			}
		})
	}
}

func relink(t *testing.T, target, name string) {
	t.Helper()
	if err := os.RemoveAll(name); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, name); err != nil {
		t.Fatal(err)
	}
}

// TestWalkDirDotDotDigest: a descriptor whose "digest" climbs out of the
// blobs dir is never opened: digests are validated (hex only) before a blob
// name is built from them.
func TestWalkDirDotDotDigest(t *testing.T) {
	im := makeImage(t, "amd64", None, "bin/sh")
	root := t.TempDir()
	dir, outside := filepath.Join(root, "layout"), filepath.Join(root, "outside")
	writeLayout(t, outside, indexJSON(t), im.blobs()...)
	m := im.manifest.desc()
	m.Digest = digest.Digest("sha256:../../../outside/blobs/sha256/" + digestHex(im.manifest.data))
	writeLayout(t, dir, indexJSON(t, withAnnotations(m, annotationContainerdName, "docker.io/library/a:1")))
	st := newMemStore()
	res, err := WalkDir(t.Context(), dir, st)
	if err == nil {
		t.Fatalf("walk of an index naming ../ succeeded: %v", names(res))
	}
	if len(st.blobs) != 0 || len(st.puts) != 0 {
		t.Fatalf("blobs read from outside the layout dir: %v", st.puts)
	}
}

func digestHex(b []byte) string { return blob{data: b}.digest().Encoded() }

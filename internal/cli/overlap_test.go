package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A spool dir that is, holds or lies in an images dir (the default one and
// <data-dir>/pins included, through symlinks, from flags or the environment)
// is bad usage, refused before anything runs: a pass would import that images
// dir's archives as kept sources and delete them.
func TestSpoolOverlappingImagesDirRefused(t *testing.T) {
	root := t.TempDir()
	images := filepath.Join(root, "images")
	archive := filepath.Join(images, "app.tar")
	if err := os.MkdirAll(filepath.Join(images, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(archive, []byte("not read"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(images, link); err != nil {
		t.Fatal(err)
	}
	dd := filepath.Join(root, "data")
	for _, tc := range []struct {
		name        string
		env         []string
		args        []string
		spool, imgs string // as the error names them
	}{
		{"equal", nil, []string{"--images", images, "--spool", images}, images, images},
		{"inside", nil, []string{"--images", images, "--spool", filepath.Join(images, "sub")}, filepath.Join(images, "sub"), images},
		{"parent", nil, []string{"--images", filepath.Join(images, "sub"), "--spool", images}, images, filepath.Join(images, "sub")},
		{"through a symlink", nil, []string{"--images", images, "--spool", link}, link, images},
		{"the default images dir", nil, []string{"--spool", dd}, dd, filepath.Join(dd, "images")},
		{"the pins dir", nil, []string{"--images", images, "--spool", filepath.Join(dd, "pins")}, filepath.Join(dd, "pins"), filepath.Join(dd, "pins")},
		{"from the environment", []string{"HOLDFAST_IMAGES=" + images, "HOLDFAST_SPOOL=" + images}, nil, images, images},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, kv := range tc.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			for _, command := range []string{"sync", "run", "plan", "status"} {
				_, errOut, code := holdfast(t, append([]string{command, "--data-dir", dd, "--address", filepath.Join(root, "none.sock")}, tc.args...)...)
				if code != 2 || !strings.Contains(errOut, "spool dir "+tc.spool) || !strings.Contains(errOut, "images dir "+tc.imgs) {
					t.Errorf("%s: exit %d, want 2 with an error naming spool dir %s and images dir %s:\n%s", command, code, tc.spool, tc.imgs, errOut)
				}
			}
			if _, err := os.Stat(archive); err != nil {
				t.Fatalf("the images dir's archive: %v", err)
			}
		})
	}
	// Side by side is fine.
	spool := filepath.Join(root, "spool")
	if _, errOut, code := holdfast(t, "pin", "--data-dir", dd, "--images", images, "--spool", spool, "example.com/app"); code != 0 {
		t.Errorf("a spool dir beside the images dir: exit %d\n%s", code, errOut)
	}
}

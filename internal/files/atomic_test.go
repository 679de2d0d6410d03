package files

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWriteFile: each writer leaves the new content under the name, with
// the mode asked whatever the umask, and no temp file beside it.
func TestWriteFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(d)
	writers := map[string]func(path string, data []byte, perm os.FileMode) error{
		"WriteFile":   WriteFile,
		"ReplaceFile": ReplaceFile,
		"WriteFileAt": func(path string, data []byte, perm os.FileMode) error {
			return WriteFileAt(d, filepath.Base(path), data, perm)
		},
	}
	for name, write := range writers {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := write(path, []byte("new"), 0o644); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := os.ReadFile(path)
		fi, serr := os.Stat(path)
		if err != nil || serr != nil || string(b) != "new" || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: %q, %v, %v; want \"new\", mode 0644", name, b, err, fi)
		}
	}
	noTemp(t, dir)
}

// TestWriteFileAtNoLink: WriteFileAt writes under the directory it was
// given, whatever its path now names.
func TestWriteFileAtNoLink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := unix.Open(real, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(d)
	if err := os.Rename(real, filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAt(d, "f", []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "moved", "f")); err != nil {
		t.Errorf("the file is not in the directory given: %v", err)
	}
	if _, err := os.Stat(filepath.Join(real, "f")); err == nil {
		t.Error("the file was written where the directory's path now leads")
	}
}

// TestPending: a Pending file is invisible under its name until Commit,
// and Abort leaves nothing.
func TestPending(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "out.tar")
	p, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.WriteString("whole"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Fatal("the file is under its name before Commit")
	}
	if !strings.HasSuffix(p.Name(), ".partial") || !strings.HasPrefix(filepath.Base(p.Name()), ".out.tar.") {
		t.Errorf("temp name %s; want .out.tar.*.partial", p.Name())
	}
	if err := p.Commit(0o644); err != nil {
		t.Fatal(err)
	}
	p.Abort() // after Commit: nothing to do
	if b, err := os.ReadFile(path); err != nil || string(b) != "whole" {
		t.Errorf("after Commit: %q, %v", b, err)
	}
	q, err := Create(filepath.Join(dir, "gone.tar"))
	if err != nil {
		t.Fatal(err)
	}
	q.Abort()
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("after Abort: %v; want out.tar alone", entries)
	}
}

func noTemp(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("temp file %s left", e.Name())
		}
	}
}

package source

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"testing"
)

func tarBytes(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "manifest.json", Mode: 0o644, Size: 2}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte("[]"))
	tw.Close()
	return buf.Bytes()
}

func gzipBytes(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestScan(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	images := filepath.Join(dir, "images")
	tb := tarBytes(t)
	write(t, filepath.Join(images, "a.tar"), tb)
	write(t, filepath.Join(images, "sub", "deep", "b.bin"), gzipBytes(t, tb)) // classified by bytes, not name
	write(t, filepath.Join(images, "notes.md"), []byte("hello, not an archive"))
	write(t, filepath.Join(images, "list.txt"), []byte("docker.io/library/busybox:1.36\n"))
	write(t, filepath.Join(images, "keep.pins"), []byte("docker.io/library/*\n"))
	write(t, filepath.Join(images, ".hidden.tar"), tb)
	write(t, filepath.Join(images, "c.tar.tmp"), tb)
	write(t, filepath.Join(images, "c.tar.partial"), tb)
	write(t, filepath.Join(images, "c.tar.part"), tb)
	write(t, filepath.Join(images, "c.tar~"), tb)
	write(t, filepath.Join(images, ".git", "x.tar"), tb)
	write(t, filepath.Join(images, "layout", "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`))
	write(t, filepath.Join(images, "layout", "index.json"), []byte(`{"schemaVersion":2,"manifests":[]}`))
	write(t, filepath.Join(images, "layout", "blobs", "sha256", "inner.tar"), tb) // inside a layout: not its own source
	write(t, filepath.Join(dir, "images-old", "old.tar"), tb)                     // a sibling: never read

	res := Scan([]string{images})
	if len(res.Errors) != 0 {
		t.Fatalf("errors: %v", res.Errors)
	}
	want := map[string]Kind{
		filepath.Join(images, "a.tar"):                Archive,
		filepath.Join(images, "sub", "deep", "b.bin"): Archive,
		filepath.Join(images, "list.txt"):             PullList,
		filepath.Join(images, "keep.pins"):            PinList,
		filepath.Join(images, "layout"):               OCIDir,
	}
	got := map[string]Kind{}
	for _, s := range res.Sources {
		got[s.Path] = s.Kind
		if s.Identity == "" {
			t.Errorf("%s has no identity", s.Path)
		}
	}
	if len(got) != len(want) {
		t.Errorf("sources = %v, want %v", got, want)
	}
	for p, k := range want {
		if got[p] != k {
			t.Errorf("%s: kind %q, want %q", p, got[p], k)
		}
	}
	skipped := map[string]bool{}
	for _, s := range res.Skipped {
		skipped[filepath.Base(s.Path)] = true
	}
	for _, name := range []string{"notes.md", ".hidden.tar", "c.tar.tmp", "c.tar.partial", "c.tar.part", "c.tar~", ".git"} {
		if !skipped[name] {
			t.Errorf("%s not skipped", name)
		}
	}
}

func TestIdentityChanges(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "a.tar")
	write(t, p, tarBytes(t))
	first := Scan([]string{dir}).Sources[0].Identity
	if again := Scan([]string{dir}).Sources[0].Identity; again != first {
		t.Fatalf("identity changed without a change: %s vs %s", first, again)
	}
	// Replace in place with content of the same size: mtime/ctime/inode move.
	tmp := filepath.Join(dir, "new.tmp")
	write(t, tmp, tarBytes(t))
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	if again := Scan([]string{dir}).Sources[0].Identity; again == first {
		t.Fatalf("identity did not change after a replace: %s", again)
	}
}

func TestScanMissingDir(t *testing.T) {
	t.Parallel()
	res := Scan([]string{filepath.Join(t.TempDir(), "nope")})
	if len(res.Errors) != 1 {
		t.Fatalf("errors = %v, want one", res.Errors)
	}
	if len(res.Unreadable) != 1 {
		t.Errorf("unreadable = %v, want the missing dir: what it held must be kept", res.Unreadable)
	}
}

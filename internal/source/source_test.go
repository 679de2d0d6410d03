package source

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/holdfast-project/holdfast/internal/testenv"
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

func TestScanSymlinkedDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk", "images")
	write(t, filepath.Join(disk, "a.tar"), tarBytes(t))
	write(t, filepath.Join(disk, "sub", "b.tar"), tarBytes(t))
	link := filepath.Join(dir, "images")
	if err := os.Symlink(disk, link); err != nil {
		t.Fatal(err)
	}
	res := Scan([]string{link})
	if len(res.Errors) != 0 {
		t.Fatalf("errors: %v", res.Errors)
	}
	var got []string
	for _, s := range res.Sources {
		got = append(got, s.Path)
	}
	want := []string{filepath.Join(link, "a.tar"), filepath.Join(link, "sub", "b.tar")}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("sources = %v, want %v (named under the dir as given)", got, want)
	}
	real, _ := filepath.EvalSymlinks(disk)
	if res.Links[link] != real {
		t.Errorf("links = %v, want %s → %s", res.Links, link, real)
	}
}

// TestScanNeverOpensSpecialFiles: named pipes, devices and symlinks to them
// are skipped with a reason, never opened (opening a pipe would block); a
// symlink to a directory is not followed.
func TestScanNeverOpensSpecialFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	images := filepath.Join(dir, "images")
	write(t, filepath.Join(images, "a.tar"), tarBytes(t))
	pipe := filepath.Join(dir, "pipe")
	for _, p := range []string{pipe, filepath.Join(images, "pipe.tar")} {
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{"link.tar": pipe, "link.pins": pipe, "link.txt": pipe, "dev.tar": "/dev/null", "dir.tar": dir}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(images, name)); err != nil {
			t.Fatal(err)
		}
	}
	res := Scan([]string{images})
	// A symlink to a directory is not followed: what it held is unknown, not gone.
	dirLink := filepath.Join(images, "dir.tar")
	if len(res.Errors) != 1 || !strings.Contains(res.Errors[0].Error(), "symlink to a directory") ||
		len(res.Unreadable) != 1 || res.Unreadable[0] != dirLink {
		t.Errorf("errors %v, unreadable %v; want %s alone", res.Errors, res.Unreadable, dirLink)
	}
	if len(res.Sources) != 1 || res.Sources[0].Path != filepath.Join(images, "a.tar") {
		t.Errorf("sources = %v, want a.tar alone", res.Sources)
	}
	reasons := map[string]string{}
	for _, s := range res.Skipped {
		reasons[filepath.Base(s.Path)] = s.Reason
	}
	for _, name := range []string{"pipe.tar", "link.tar", "link.pins", "link.txt", "dev.tar"} {
		if !strings.HasPrefix(reasons[name], "not a regular file") {
			t.Errorf("%s: skipped for %q, want not a regular file", name, reasons[name])
		}
	}
}

// TestOpenRefusesSpecialFiles: a file swapped for a named pipe after a scan
// is refused by Open (and by the list readers) instead of blocking them.
func TestOpenRefusesSpecialFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pipe := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(pipe, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.pins")
	if err := os.Symlink(pipe, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{pipe, link} {
		if f, err := Open(p); !errors.Is(err, ErrNotRegular) {
			if f != nil {
				f.Close()
			}
			t.Errorf("Open(%s): %v, want ErrNotRegular", p, err)
		}
	}
	if _, err := ReadPinList(link); !errors.Is(err, ErrNotRegular) {
		t.Errorf("ReadPinList(a link to a pipe): %v, want ErrNotRegular", err)
	}
	regular := filepath.Join(dir, "a.tar")
	write(t, regular, tarBytes(t))
	f, err := Open(regular)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if b, err := io.ReadAll(f); err != nil || !bytes.Equal(b, tarBytes(t)) {
		t.Errorf("reading a regular file through Open: %d bytes, %v", len(b), err)
	}
}

func TestScanMarker(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	marked, unmarked := filepath.Join(dir, "marked"), filepath.Join(dir, "unmarked")
	write(t, filepath.Join(marked, Marker), nil)
	write(t, filepath.Join(unmarked, "a.tar"), tarBytes(t))
	res := Scan([]string{marked, unmarked, filepath.Join(dir, "missing")})
	if strings.Join(res.Unmarked, " ") != unmarked {
		t.Errorf("unmarked = %v, want %s alone (a missing dir is unreadable, not unmarked)", res.Unmarked, unmarked)
	}
	for _, s := range res.Sources {
		if filepath.Base(s.Path) == Marker {
			t.Errorf("the marker is a source: %v", s)
		}
	}
}

// TestScanMarkerReadOnly: a dir the marker cannot be written to never had
// one: its lack says nothing, and it is not reported unmarked.
func TestScanMarkerReadOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	testenv.RequireRoot(t, "mounts a read-only tmpfs")
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_RDONLY, "size=1m"); err != nil {
		t.Fatalf("mounting a read-only tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	if res := Scan([]string{dir}); len(res.Unmarked) != 0 || len(res.Errors) != 0 {
		t.Errorf("read-only dir: unmarked %v, errors %v; want neither", res.Unmarked, res.Errors)
	}
}

// TestUnnamedTarIsSource: a file not named as an archive is one when it
// starts like a tar (archive.IsTarHeader): a whole header, or only the ustar
// magic where a header has it (a damaged tar, whose import then says what is
// wrong); a file without either is skipped.
func TestUnnamedTarIsSource(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	magicOnly := make([]byte, 1024)
	copy(magicOnly[257:], "ustar")
	write(t, filepath.Join(dir, "image.bin"), tarBytes(t))
	write(t, filepath.Join(dir, "magic.bin"), magicOnly)
	write(t, filepath.Join(dir, "notes.bin"), bytes.Repeat([]byte("not a tar\n"), 100))
	res := Scan([]string{dir})
	var names []string
	for _, s := range res.Sources {
		if s.Kind == Archive {
			names = append(names, filepath.Base(s.Path))
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"image.bin", "magic.bin"}) {
		t.Errorf("archive sources = %v, want image.bin and magic.bin", names)
	}
	if len(res.Skipped) != 1 || filepath.Base(res.Skipped[0].Path) != "notes.bin" || res.Skipped[0].Reason != "not an archive" {
		t.Errorf("skipped = %+v, want notes.bin, not an archive", res.Skipped)
	}
}

// TestArchiveNamedFilesAreSources: a file named as an archive is an archive
// source whatever its bytes (empty, one byte, text): its import fails naming
// the cause, it is never skipped. Other names are classified by their bytes.
// A lone part of a split archive is that archive, incomplete.
func TestArchiveNamedFilesAreSources(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := map[string][]byte{
		"empty.tar":          nil,
		"one-byte.tar.gz":    {0x1f},
		"text.tar":           []byte("just text\n"),
		"text.TZST":          []byte("just text\n"),
		"bundle.tar.zst.002": []byte("the middle of a split archive"),
		"bundle.tar.part003": []byte("the middle of a split archive"),
		"notes.md":           []byte("just text\n"),
		"data.001":           []byte("a numbered file that is no archive"),
		"app.tar.bak":        []byte("a backup, not named as an archive"),
	}
	for name, b := range files {
		write(t, filepath.Join(dir, name), b)
	}
	res := Scan([]string{dir})
	got := map[string]bool{}
	incomplete := map[string]string{}
	for _, s := range res.Sources {
		if s.Kind != Archive {
			t.Errorf("%s: kind %s", s.Path, s.Kind)
		}
		got[filepath.Base(s.Path)] = true
		incomplete[filepath.Base(s.Path)] = s.Incomplete
	}
	for name := range files {
		if want := ArchiveName(name) && !strings.HasPrefix(name, "bundle."); got[name] != want {
			t.Errorf("%s: a source: %v, want %v", name, got[name], want)
		}
	}
	for _, name := range []string{"empty.tar", "one-byte.tar.gz", "text.tar", "text.TZST", "bundle.tar.zst", "bundle.tar"} {
		if !got[name] {
			t.Errorf("%s is not a source", name)
		}
	}
	for name, why := range map[string]string{
		"bundle.tar.zst": "part bundle.tar.zst.001 of 2 is missing",
		"bundle.tar":     "bundle.tar.part000 is missing",
	} {
		if !strings.Contains(incomplete[name], why) {
			t.Errorf("%s: incomplete %q, want %q", name, incomplete[name], why)
		}
	}
	for _, name := range []string{"notes.md", "data.001", "app.tar.bak"} {
		if got[name] {
			t.Errorf("%s is a source", name)
		}
	}
}

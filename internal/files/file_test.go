package files

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadFile: a regular file is read up to its limit; a larger one is
// ErrTooLarge after reading no more than the limit, however large (a sparse
// 8 GiB file); a named pipe without a writer, a symlink to /dev/zero and a
// directory are ErrNotRegular at once, with the kind of file named and the
// path in the error. Nothing waits on the pipe.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(8 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path  string
		limit int64
		want  string
		err   error
		kind  string
	}{
		{small, 3, "abc", nil, ""},
		{small, 2, "", ErrTooLarge, ""},
		{huge, 1 << 20, "", ErrTooLarge, ""},
		{fifo, 1 << 20, "", ErrNotRegular, "a named pipe"},
		{zero, 1 << 20, "", ErrNotRegular, "a character device"},
		{dir, 1 << 20, "", ErrNotRegular, "a directory"},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		done := make(chan struct{})
		var got []byte
		var err error
		go func() { got, err = ReadFile(c.path, c.limit); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("ReadFile(%s) has not returned after 20s", c.path)
		}
		runtime.ReadMemStats(&after)
		if string(got) != c.want || !errors.Is(err, c.err) || (err == nil) != (c.err == nil) {
			t.Errorf("ReadFile(%s, %d) = %q, %v; want %q, %v", c.path, c.limit, got, err, c.want, c.err)
		}
		if c.kind != "" && (!strings.Contains(err.Error(), c.path) || !strings.HasSuffix(err.Error(), "not a regular file: "+c.kind)) {
			t.Errorf("ReadFile(%s): %v; want the path and %q", c.path, err, c.kind)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
			t.Errorf("ReadFile(%s, %d) allocated %d MiB", c.path, c.limit, grew>>20)
		}
	}
	// What Open hands back reads as usual: blocking again.
	rf, err := Open(small)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	if b, err := ReadAll(rf, 10); string(b) != "abc" || err != nil {
		t.Errorf("reading what Open opened: %q, %v", b, err)
	}
}

// TestOpenIn: a regular file under the root opens; a named pipe is
// ErrNotRegular at once, and a link out of the root is refused.
func TestOpenIn(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	f, err := OpenIn(root, "f")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := ReadAll(f, 10); string(b) != "abc" || err != nil {
		t.Errorf("reading what OpenIn opened: %q, %v", b, err)
	}
	f.Close()
	if _, err := OpenIn(root, "fifo"); !errors.Is(err, ErrNotRegular) || !strings.HasSuffix(err.Error(), "a named pipe") {
		t.Errorf("OpenIn of a named pipe: %v; want ErrNotRegular", err)
	}
	if _, err := OpenIn(root, "out"); err == nil {
		t.Error("OpenIn followed a link out of its root")
	}
}

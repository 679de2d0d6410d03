package pass

import (
	"context"
	"io"
	"path/filepath"
	"sync"
	"testing"

	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/testenv/testimage"
)

// progressSeen records what a progress hook was told.
type progressSeen struct {
	mu     sync.Mutex
	paths  map[string]int64 // size given, by path
	read   map[string]int   // bytes read through the hook's reader
	closed map[string]bool
}

type progressCounter struct {
	r    io.ReadCloser
	path string
	seen *progressSeen
}

func (c *progressCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.seen.mu.Lock()
	c.seen.read[c.path] += n
	c.seen.mu.Unlock()
	return n, err
}

func (c *progressCounter) Close() error {
	c.seen.mu.Lock()
	c.seen.closed[c.path] = true
	c.seen.mu.Unlock()
	return c.r.Close()
}

// TestProgressFollowsEachArchiveRead: the progress hook of a pass and of Keep
// (images dirs and spool dirs) is given each archive file the import opens, with its size, and sees the
// bytes read and the close.
func TestProgressFollowsEachArchiveRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	archive := filepath.Join(dir, "p.tar")
	size := testimage.Archive(t, archive, "example.com/a:1")
	spool := t.TempDir()
	spooled := filepath.Join(spool, "b.tar")
	spoolSize := testimage.Archive(t, spooled, "example.com/b:1")
	rt := fake.New()
	seen := &progressSeen{paths: map[string]int64{}, read: map[string]int{}, closed: map[string]bool{}}
	hook := func(path string, size int64, r io.ReadCloser) io.ReadCloser {
		seen.mu.Lock()
		seen.paths[path] = size
		seen.mu.Unlock()
		return &progressCounter{r: r, path: path, seen: seen}
	}

	Sync(context.Background(), rt, Config{ImageDirs: []string{dir}, SpoolDirs: []string{spool}, Progress: hook})
	if seen.paths[archive] != size || int64(seen.read[archive]) != size || !seen.closed[archive] {
		t.Errorf("a pass's hook saw sizes %v, read %v, closed %v; want %s: %d bytes, all read, closed", seen.paths, seen.read, seen.closed, archive, size)
	}
	if seen.paths[spooled] != spoolSize || int64(seen.read[spooled]) != spoolSize || !seen.closed[spooled] {
		t.Errorf("a pass's hook saw sizes %v, read %v, closed %v; want the spool file %s: %d bytes, all read, closed", seen.paths, seen.read, seen.closed, spooled, spoolSize)
	}

	seen.paths, seen.read, seen.closed = map[string]int64{}, map[string]int{}, map[string]bool{}
	if _, err := Keep(context.Background(), rt, archive, Standing{}, KeepOptions{Progress: hook}); err != nil {
		t.Fatal(err)
	}
	if seen.paths[archive] != size || int64(seen.read[archive]) != size || !seen.closed[archive] {
		t.Errorf("Keep's hook saw sizes %v, read %v, closed %v; want %s: %d bytes, all read, closed", seen.paths, seen.read, seen.closed, archive, size)
	}
}

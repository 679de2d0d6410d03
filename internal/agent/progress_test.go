package agent

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
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
	archive := filepath.Join(dir, "a.tar")
	body := make([]byte, 3000)
	copy(body[257:], "ustar")
	if err := os.WriteFile(archive, body, 0o644); err != nil {
		t.Fatal(err)
	}
	spool := t.TempDir()
	spooled := filepath.Join(spool, "b.tar")
	if err := os.WriteFile(spooled, body[:2048], 0o644); err != nil {
		t.Fatal(err)
	}
	rt := fake.New()
	rt.ImportFunc = func(req hfruntime.ImportRequest) (hfruntime.ImportResult, error) {
		rc, err := req.Open()
		if err != nil {
			return hfruntime.ImportResult{}, err
		}
		defer rc.Close()
		n, err := io.Copy(io.Discard, rc)
		return hfruntime.ImportResult{Lease: "holdfast/" + filepath.Base(req.Source), BytesRead: n}, err
	}
	seen := &progressSeen{paths: map[string]int64{}, read: map[string]int{}, closed: map[string]bool{}}
	hook := func(path string, size int64, r io.ReadCloser) io.ReadCloser {
		seen.mu.Lock()
		seen.paths[path] = size
		seen.mu.Unlock()
		return &progressCounter{r: r, path: path, seen: seen}
	}

	Sync(context.Background(), rt, Config{ImageDirs: []string{dir}, SpoolDirs: []string{spool}, Progress: hook})
	if seen.paths[archive] != 3000 || seen.read[archive] != 3000 || !seen.closed[archive] {
		t.Errorf("a pass's hook saw sizes %v, read %v, closed %v; want %s: 3000 bytes, all read, closed", seen.paths, seen.read, seen.closed, archive)
	}
	if seen.paths[spooled] != 2048 || seen.read[spooled] != 2048 || !seen.closed[spooled] {
		t.Errorf("a pass's hook saw sizes %v, read %v, closed %v; want the spool file %s: 2048 bytes, all read, closed", seen.paths, seen.read, seen.closed, spooled)
	}

	seen.paths, seen.read, seen.closed = map[string]int64{}, map[string]int{}, map[string]bool{}
	_, _ = Keep(context.Background(), rt, archive, Standing{}, hook)
	if seen.paths[archive] != 3000 || seen.read[archive] != 3000 || !seen.closed[archive] {
		t.Errorf("Keep's hook saw sizes %v, read %v, closed %v; want %s: 3000 bytes, all read, closed", seen.paths, seen.read, seen.closed, archive)
	}
}

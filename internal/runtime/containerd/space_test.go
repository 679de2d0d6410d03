package containerd

import (
	"context"
	"path/filepath"
	"testing"
)

func TestSpaceArithmetic(t *testing.T) {
	// Each blob is a file: up to a block more than its bytes on disk.
	for _, c := range []struct {
		blobs      int
		bytes, bsz int64
		want       int64
	}{
		{0, 0, 4096, 0},
		{1, 1, 4096, 4096},
		{3, 100 << 20, 4096, 100<<20 + 3*4095},
		{2, 10, 0, 10},
	} {
		if got := onDisk(c.blobs, c.bytes, c.bsz); got != c.want {
			t.Errorf("onDisk(%d, %d, %d) = %d; want %d", c.blobs, c.bytes, c.bsz, got, c.want)
		}
	}
	for _, c := range []struct{ need, free, keep, want int64 }{
		{10, 100, 90, 0},   // leaves exactly what must stay
		{10, 100, 91, 1},   // one byte short
		{200, 100, 0, 100}, // does not fit at all
		{0, 0, 0, 0},
		{5, 100, 200, 105}, // already below the minimum
	} {
		if got := shortfall(c.need, c.free, c.keep); got != c.want {
			t.Errorf("shortfall(%d, %d, %d) = %d; want %d", c.need, c.free, c.keep, got, c.want)
		}
	}
}

// TestSpaceOfMissingRoot: a content store directory containerd has not made
// yet (1.7 and 2.2 make it at their first write) is checked on the
// filesystem of the directory it will be made in, not skipped: a write
// larger than what is free there is refused.
func TestSpaceOfMissingRoot(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "root", "io.containerd.content.v1.content")
	g := &spaceGuard{resolved: true, root: missing} // as rootOf leaves it for containerd's answer
	if got := g.rootOf(context.Background(), nil); got != missing {
		t.Fatalf("root %q, want %q", got, missing)
	}
	fs, err := statfs(filepath.Dir(filepath.Dir(missing)))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.check(context.Background(), nil, "a test", 1, fs.free+1<<30); err == nil {
		t.Errorf("a write of %d bytes with %d free: allowed", fs.free+1<<30, fs.free)
	}
	if err := g.check(context.Background(), nil, "a test", 1, 1); err != nil {
		t.Errorf("a write of 1 byte: %v", err)
	}
}

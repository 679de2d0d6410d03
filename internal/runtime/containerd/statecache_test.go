package containerd

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"
)

func TestStateCache(t *testing.T) {
	c := stateCache{dir: filepath.Join(t.TempDir(), "state")}
	a, b := []byte(`{"lease":"holdfast/a"}`), []byte(`{"lease":"holdfast/b"}`)
	da, db := digest.FromBytes(a), digest.FromBytes(b)
	if got := c.get(da); got != nil {
		t.Fatalf("empty cache returned %q", got)
	}
	c.put(da, a)
	c.put(db, b)
	if got := c.get(da); string(got) != string(a) {
		t.Fatalf("get = %q, want %q", got, a)
	}
	// A copy whose bytes do not have its digest is not used.
	if err := os.WriteFile(c.path(db), []byte(`{"lease":"holdfast/evil"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := c.get(db); got != nil {
		t.Fatalf("a corrupted copy was used: %q", got)
	}
	if err := os.WriteFile(filepath.Join(c.dir, ".tmp-123"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.prune(map[digest.Digest]bool{da: true})
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != filepath.Base(c.path(da)) {
		t.Fatalf("after prune the cache holds %v, want only the copy of %s", entries, da)
	}
	// No directory: nothing cached, nothing fails.
	var none stateCache
	none.put(da, a)
	if none.get(da) != nil {
		t.Fatal("a cache without a directory returned a copy")
	}
}

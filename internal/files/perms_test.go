package files

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

// TestCheckPermsRunningUser: the user holdfast runs as may own what it reads.
func TestCheckPermsRunningUser(t *testing.T) {
	testenv.RequireRoot(t, "chown to another user")
	t.Parallel()
	dir := t.TempDir()
	if err := os.Chown(dir, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if err := CheckPerms("images dir", dir, 1000); err != nil {
		t.Fatalf("uid 1000's own dir refused for uid 1000: %v", err)
	}
	if err := CheckPerms("images dir", dir, 1001); err == nil || !strings.Contains(err.Error(), "owned by uid 1000, not root or holdfast's uid 1001") {
		t.Fatalf("uid 1000's dir for uid 1001: %v", err)
	}
}

// TestCheckResolved: the path judged, to be read in place of the path
// given, is the file a symlink resolves to, absolute; a path that does not
// resolve is not judged (reading it says why).
func TestCheckResolved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	target := filepath.Join(dir, "real", "k.pub")
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, []byte("key\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "k.pub")
	if err := os.Symlink(filepath.Join("real", "k.pub"), link); err != nil {
		t.Fatal(err)
	}
	if got, err := CheckResolved("key", link, os.Geteuid()); got != target || err != nil {
		t.Errorf("CheckResolved(%s) = %q, %v; want %q", link, got, err, target)
	}
	if got, err := CheckResolved("key", filepath.Join(dir, "gone.pub"), os.Geteuid()); got != "" || err != nil {
		t.Errorf("CheckResolved of a missing file = %q, %v; want nothing", got, err)
	}
}

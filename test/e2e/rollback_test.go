package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// olderRelease is the last holdfast without kept sources: a node rolled back
// to it must keep what `holdfast import` kept.
const olderRelease = "61ea9d4b25c7ead18d55ccfa1c35bfe6add724cb"

var (
	olderOnce sync.Once
	olderBin  string
	olderErr  string
)

// olderHoldfast builds holdfast at olderRelease from the repository's history
// (once, cached under $HOME/.cache/holdfast/older/<commit>).
func olderHoldfast(t *testing.T) string {
	t.Helper()
	olderOnce.Do(func() {
		root := repoRoot()
		home, err := os.UserHomeDir()
		if err != nil {
			olderErr = err.Error()
			return
		}
		bin := filepath.Join(home, ".cache", "holdfast", "older", olderRelease, "holdfast")
		if _, err := os.Stat(bin); err == nil {
			olderBin = bin
			return
		}
		if out, err := exec.Command("git", "-C", root, "cat-file", "-e", olderRelease+"^{commit}").CombinedOutput(); err != nil {
			olderErr = "needs the repository's history (a git clone) to build holdfast at " + olderRelease + ": " + string(out)
			return
		}
		src, err := os.MkdirTemp("", "holdfast-older-")
		if err != nil {
			olderErr = err.Error()
			return
		}
		defer os.RemoveAll(src)
		steps := [][]string{
			{"sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, olderRelease, src},
			{"go", "build", "-trimpath", "-o", bin, "./cmd/holdfast"},
		}
		for _, s := range steps {
			cmd := exec.Command(s[0], s[1:]...)
			cmd.Dir = src
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				olderErr = "building holdfast at " + olderRelease + ": " + err.Error() + "\n" + string(out)
				return
			}
		}
		olderBin = bin
	})
	if olderErr != "" {
		t.Fatal(olderErr)
	}
	return olderBin
}

// TestRollbackKeepsKeptSources: a node rolled back to the holdfast before
// kept sources runs its passes over a store a newer one filled. A kept source
// whose file lay in an images dir and is gone stays leased and pinned (that
// holdfast judges it as another configuration's and leaves it alone), while
// an images-dir source whose file is gone is still released by it (it did
// judge the dir). Back on this holdfast, the kept source is the path imported.
func TestRollbackKeepsKeptSources(t *testing.T) {
	older := olderHoldfast(t)
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		if err := os.MkdirAll(imagesDir, 0o755); err != nil {
			t.Fatal(err)
		}
		kept, dropped := filepath.Join(imagesDir, "kept.tar"), filepath.Join(imagesDir, "dropped.tar")
		writeDockerSave(t, dropped, build(t, fixture.ImageSpec{Names: []string{"e2e.local/rollback/dropped:1"}, Layers: fixture.UniformLayers(1, 16<<10, false, 31)}))
		d.syncOK(t, dataDir, imagesDir)
		writeDockerSave(t, kept, build(t, fixture.ImageSpec{Names: []string{"e2e.local/rollback/kept:1"}, Layers: fixture.UniformLayers(1, 16<<10, false, 32)}))
		d.keepImportOK(t, dataDir, kept)
		for _, p := range []string{kept, dropped} {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}

		res := runHoldfast(t, exec.Command(older, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir))
		if res.Code != 0 {
			t.Fatalf("the older holdfast's sync exited %d\n%s", res.Code, tail(res.Stderr, 20))
		}
		d.requirePinned(t, "e2e.local/rollback/kept:1")
		if _, ok := d.keepLeaseOf(t, kept); !ok {
			t.Errorf("the older holdfast released the kept source %s", kept)
		}
		d.keepRequireUnpinned(t, "e2e.local/rollback/dropped:1")
		if _, ok := d.leaseOf(t, dropped); ok {
			t.Errorf("the older holdfast kept the lease of %s, whose file is gone: it judged nothing", dropped)
		}

		d.syncOK(t, dataDir, imagesDir)
		d.requirePinned(t, "e2e.local/rollback/kept:1")
		st := keepReadStatus(t, "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir)
		found := false
		for _, s := range st.Sources {
			found = found || (s.Path == kept && s.Kept && s.Images > 0)
		}
		if !found {
			t.Errorf("status lists no kept source %s with its image: %+v", kept, st.Sources)
		}
	})
}

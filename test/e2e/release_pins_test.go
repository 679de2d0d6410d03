package e2e

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// TestReleaseKeepsWhatAFreshPinWants: `holdfast pin` writes a pattern, and
// no pass has taken it in yet (no lease says the pin list wants anything),
// when the kept source that brought the image is released: the image stays
// pinned, as the pin list wants it now; the other image of that source,
// which nothing wants, is unpinned.
func TestReleaseKeepsWhatAFreshPinWants(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		dataDir := filepath.Join(dir, "data")
		fresh := build(t, fixture.ImageSpec{Names: []string{"e2e.local/fresh/app:1"}})
		lone := build(t, fixture.ImageSpec{Names: []string{"e2e.local/fresh/lone:1"}})
		archive := filepath.Join(dir, "app.tar")
		writeDockerSave(t, archive, fresh, lone)
		d.keepImportOK(t, dataDir, archive)
		d.requirePinned(t, "e2e.local/fresh/app:1", "e2e.local/fresh/lone:1")

		if res := holdfast(t, "pin", "--data-dir", dataDir, "e2e.local/fresh/app"); res.Code != 0 {
			t.Fatalf("pin exited %d: %s", res.Code, res.Stderr)
		}
		res := holdfast(t, "release", "--address", d.Address, "--data-dir", dataDir, "--dry-run", archive)
		if res.Code != 0 || strings.Contains(res.Stdout, "app:1") || !strings.Contains(res.Stdout, "would unpin e2e.local/fresh/lone:1") {
			t.Errorf("release --dry-run exited %d, said:\n%s\nwant lone:1 unpinned and app:1 not\n%s", res.Code, res.Stdout, res.Stderr)
		}
		res = holdfast(t, "release", "--address", d.Address, "--data-dir", dataDir, archive)
		if res.Code != 0 {
			t.Fatalf("release exited %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
		}
		if strings.Contains(res.Stdout, "unpinned e2e.local/fresh/app:1") {
			t.Errorf("release says it unpinned what the pin list wants:\n%s", res.Stdout)
		}
		d.requirePinned(t, "e2e.local/fresh/app:1")
		d.keepRequireUnpinned(t, "e2e.local/fresh/lone:1")
		if _, ok := d.keepLeaseOf(t, archive); ok {
			t.Error("the kept lease is still there")
		}
	})
}

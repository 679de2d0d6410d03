package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// TestPinList: a .pins pattern keeps its image pinned after the archive that
// brought it is deleted, across restarts, and a crictl rmi of it then heals;
// near-misses of the pattern are not kept.
func TestPinList(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		dataDir := filepath.Join(dir, "data")
		keep := build(t, fixture.ImageSpec{Names: []string{"example.com/foo/app:1"}})
		miss1 := build(t, fixture.ImageSpec{Names: []string{"docker.io/x/example.com/foo:1"}})
		miss2 := build(t, fixture.ImageSpec{Names: []string{"docker.io/library/nginx-ingress:1"}})
		archive := filepath.Join(imagesDir, "bundle.tar")
		writeDockerSave(t, archive, keep, miss1, miss2)
		pins := "# keep the app whatever happens to its archive\nexample.com/foo*\ndocker.io/library/nginx\n"
		if err := os.WriteFile(filepath.Join(imagesDir, "keep.pins"), []byte(pins), 0o644); err != nil {
			t.Fatal(err)
		}
		d.syncOK(t, dataDir, imagesDir)
		d.requirePinned(t, "example.com/foo/app:1", "docker.io/x/example.com/foo:1", "docker.io/library/nginx-ingress:1")

		if err := os.Remove(archive); err != nil {
			t.Fatal(err)
		}
		c := d.syncOK(t, dataDir, imagesDir)
		if _, ok := d.leaseOf(t, archive); ok || c["released"] < 1 {
			t.Errorf("archive's lease not released: %v", c)
		}
		d.requirePinned(t, "example.com/foo/app:1")
		for _, n := range []string{"docker.io/x/example.com/foo:1", "docker.io/library/nginx-ingress:1"} {
			if cri, hf := d.pinnedBy(t, n); cri || hf {
				t.Errorf("near-miss %s kept pinned", n)
			}
		}
		// A restart changes nothing; then crictl rmi, and the next sync heals from the pin list's lease.
		c = d.syncOK(t, dataDir, imagesDir)
		if c["bytes0"] != 1 || c["unpinned"] != 0 {
			t.Errorf("restart: %v", c)
		}
		d.requirePinned(t, "example.com/foo/app:1")
		d.crictl(t, "rmi", "example.com/foo/app:1")
		c = d.syncOK(t, dataDir, imagesDir)
		if c["healed"] < 1 {
			t.Errorf("pinned image not healed: %v", c)
		}
		d.requirePinned(t, "example.com/foo/app:1")
		rec, _ := d.record(t, "example.com/foo/app:1")
		for _, b := range d.hostBlobs(t, rec.Target) {
			if !d.hasBlob(t, b.Digest) {
				t.Errorf("healed image lacks %s", b.Digest)
			}
		}
	})
}

// TestPinCommand: `holdfast pin` and `holdfast unpin` take effect on the running agent.
func TestPinCommand(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	app := build(t, fixture.ImageSpec{Names: []string{"e2e.local/pc/app:1"}})
	archive := filepath.Join(imagesDir, "app.tar")
	writeDockerSave(t, archive, app)
	agent := startAgent(t, d, dataDir, []string{imagesDir})
	d.waitPinned(t, "e2e.local/pc/app:1")

	res := holdfast(t, "pin", "--data-dir", dataDir, "e2e.local/pc/app")
	if res.Code != 0 {
		t.Fatalf("pin: %d %s %s", res.Code, res.Stdout, res.Stderr)
	}
	localPins := filepath.Join(dataDir, "pins", "local.pins")
	eventually(t, "the agent to lease local.pins", func() bool {
		_, ok := d.leaseOf(t, localPins)
		return ok
	})
	if err := os.Remove(archive); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the archive's lease released", func() bool {
		_, ok := d.leaseOf(t, archive)
		return !ok
	})
	d.requirePinned(t, "e2e.local/pc/app:1")

	res = holdfast(t, "unpin", "--data-dir", dataDir, "e2e.local/pc/app")
	if res.Code != 0 {
		t.Fatalf("unpin: %d %s %s", res.Code, res.Stdout, res.Stderr)
	}
	eventually(t, "app unpinned after unpin", func() bool {
		cri, hf := d.pinnedBy(t, "e2e.local/pc/app:1")
		return !cri && !hf
	})
	if strings.Contains(agent.dump(), `"level":"ERROR"`) {
		t.Errorf("the agent logged errors:\n%s", agent.dump())
	}
}

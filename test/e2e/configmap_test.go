package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/holdfast-project/holdfast/internal/fixture"
	hfsource "github.com/holdfast-project/holdfast/internal/source"
)

// cmFiles are the keys of the chart's ConfigMap: a pin list and the marker.
func cmFiles(pins string) map[string][]byte {
	return map[string][]byte{"cluster.pins": []byte(pins), hfsource.Marker: []byte("holdfast images dir\n")}
}

// cmImport brings images into d with containerd's own importer, as a pull or
// `ctr import` would: holdfast did not bring them, only a pin list keeps them.
func cmImport(t *testing.T, d *daemon, imgs ...*fixture.Image) {
	t.Helper()
	path := filepath.Join(tempDir(t), "images.tar")
	writeDockerSave(t, path, imgs...)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := d.Client.Import(d.ctx(), f); err != nil {
		t.Fatalf("importing %s: %v", path, err)
	}
}

// TestConfigMapPins: the agent reads a dir laid out as the kubelet projects a
// ConfigMap volume (keys as symlinks through "..data"), pins what its pin
// list names, and when the kubelet swaps in a new list (the atomic rename of
// "..data"), pins the newly named image and unpins the one no longer named;
// the CRI reports both changes.
func TestConfigMapPins(t *testing.T) {
	d, _, dataDir := embeddedScene(t)
	const a, b = "e2e.local/cm/a:1", "e2e.local/cm/b:1"
	cmImport(t, d, build(t, fixture.ImageSpec{Names: []string{a}}), build(t, fixture.ImageSpec{Names: []string{b}}))
	cluster := filepath.Join(tempDir(t), "cluster")
	if err := fixture.ConfigMapDir(cluster, cmFiles(a+"\n")); err != nil {
		t.Fatal(err)
	}
	agent := startAgent(t, d, dataDir, []string{cluster})
	criPinned := func(name string) bool { _, p := d.criImage(t, name); return p }
	both := func(name string) bool { cri, hf := d.pinnedBy(t, name); return cri && hf }
	eventually(t, a+" pinned from the ConfigMap's pin list", func() bool { return both(a) && criPinned(a) })
	if cri, hf := d.pinnedBy(t, b); cri || hf {
		t.Fatalf("%s pinned before any list names it\n%s", b, agent.dump())
	}

	if err := fixture.ConfigMapDir(cluster, cmFiles(b+"\n")); err != nil {
		t.Fatal(err)
	}
	eventually(t, b+" pinned and "+a+" unpinned after the swap", func() bool {
		cri, hf := d.pinnedBy(t, a)
		return both(b) && criPinned(b) && !cri && !hf && !criPinned(a)
	})
	if _, ok := d.record(t, a); !ok {
		t.Errorf("%s was deleted: unpinning must keep the record", a)
	}
}

// TestSymlinkedArchive: an archive symlinked into an images dir (as K3s users
// do with their images dir) is imported and pinned, its lease named by the link.
func TestSymlinkedArchive(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	const name = "e2e.local/cm/linked:1"
	store := filepath.Join(tempDir(t), "store", "linked.tar")
	writeDockerSave(t, store, build(t, fixture.ImageSpec{Names: []string{name}}))
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(imagesDir, "linked.tar")
	if err := os.Symlink(store, link); err != nil {
		t.Fatal(err)
	}
	d.syncOK(t, dataDir, imagesDir)
	d.requirePinned(t, name)
	if _, ok := d.leaseOf(t, link); !ok {
		t.Errorf("no lease for %s; leases %v", link, d.holdfastLeases(t))
	}
}

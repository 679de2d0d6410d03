package pass

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
)

// TestSyncRunsTheRealImport: over the fake, a pass runs the real import of
// an archive (importer.Import over the fake's store): its images are pinned,
// its lease holds them, and a second pass finds the source unchanged; one
// after a layer is deleted from the store reads it again; once the file is
// gone, the next pass unpins them and releases the lease.
func TestSyncRunsTheRealImport(t *testing.T) {
	dir := t.TempDir()
	img, err := fixture.Build(context.Background(), fixture.ImageSpec{Names: []string{"example.com/real/app:1"}, Layers: fixture.UniformLayers(2, 16<<10, false, 3)})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "app.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := fixture.WriteDockerSave(context.Background(), f, img); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	rt := fake.New()
	cfg := Config{ImageDirs: []string{dir}}
	if sum := Sync(context.Background(), rt, cfg); sum.Imported != 1 || sum.Failed != 0 {
		t.Fatalf("first pass: %s; failures %v", sum, sum.Failures)
	}
	if !pinnedIn(rt, "example.com/real/app:1") || len(leasesOf(t, rt, path)) != 1 {
		t.Errorf("after the first pass: pinned %v, leases %v", pinnedIn(rt, "example.com/real/app:1"), leasesOf(t, rt, path))
	}
	if sum := Sync(context.Background(), rt, cfg); sum.Unchanged != 1 || sum.Imported != 0 {
		t.Errorf("second pass: %s; want the source unchanged", sum)
	}
	// A layer deleted from the store (ctr content rm): the source is read
	// again, and the layer is back.
	layer := img.Manifests[0].Layers[0].Digest()
	rt.DeleteBlob(layer)
	if sum := Sync(context.Background(), rt, cfg); sum.Imported != 1 || sum.Unchanged != 0 || !rt.LeaseHolds(leasesOf(t, rt, path)[0], layer) {
		t.Errorf("pass after a layer was deleted: %s; want the source imported again and the layer leased", sum)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if sum := Sync(context.Background(), rt, cfg); sum.Released != 1 || pinnedIn(rt, "example.com/real/app:1") {
		t.Errorf("after the file went: %s; pinned %v", sum, pinnedIn(rt, "example.com/real/app:1"))
	}
}

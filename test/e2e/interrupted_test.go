package e2e

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// TestSyncInterruptedMidImport stops `holdfast sync` with SIGTERM while it is
// writing an archive's blobs: the import it gives up leaves no lease, no
// record and no ingest behind (the same clean-up as a failed import, though
// the pass's context is cancelled).
func TestSyncInterruptedMidImport(t *testing.T) {
	forEachDaemonAndPath(t, func(t *testing.T, d *daemon, wp string) {
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		path := filepath.Join(imagesDir, "slow.tar.bz2")
		img := build(t, fixture.ImageSpec{Names: []string{"e2e.local/interrupted/slow:1"}, Layers: fixture.UniformLayers(4, 8<<20, true, 21)})
		// bzip2 decodes at a few tens of MB/s here: the import takes seconds.
		writeArchive(t, path, fixture.Bzip2, fixture.CompressOptions{Level: 1},
			func(ctx context.Context, w io.Writer) error {
				return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerd}, img)
			})
		cmd := exec.Command(holdfastBin, "sync", "--address", d.Address, "--data-dir", filepath.Join(dir, "data"), "--images", imagesDir, wpFlag(wp))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				<-done
			}
		})
		// Wait until the import holds its lease and is writing: an ingest
		// open, or on the direct path a temp file in the content store.
		writing := func() bool { return len(d.ingests(t)) > 0 }
		if wp == "direct" {
			tmp := filepath.Join(directContentRoot(t, d), "holdfast-tmp")
			writing = func() bool { e, _ := os.ReadDir(tmp); return len(e) > 0 }
		}
		deadline := time.Now().Add(time.Minute)
		for {
			_, leased := d.leaseOf(t, path)
			if leased && writing() {
				break
			}
			select {
			case err := <-done:
				t.Fatalf("sync ended (%v) before it was seen writing", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("the import never held a lease with an ingest open")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			t.Logf("sync after SIGTERM: %v", err)
		case <-time.After(time.Minute):
			t.Fatal("sync did not stop within a minute of SIGTERM")
		}
		if l, ok := d.leaseOf(t, path); ok {
			t.Errorf("lease %s was left by the interrupted import", l.ID)
		}
		if refs := d.ingests(t); len(refs) != 0 {
			t.Errorf("ingests left: %v", refs)
		}
		if _, ok := d.record(t, "e2e.local/interrupted/slow:1"); ok {
			t.Error("a record was made")
		}
		wpRequireStoreClean(t, d, map[string]bool{})
	})
}

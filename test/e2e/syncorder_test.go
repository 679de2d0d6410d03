package e2e

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// TestDirectSyncsBeforeCommit traces `holdfast import` on the direct path
// with strace: each blob file is synced before it is linked into
// blobs/sha256, and the directory is synced after the links, before
// containerd is asked to record them (no link follows the last sync).
func TestDirectSyncsBeforeCommit(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Fatalf("strace is needed (scripts/deps.sh installs it): %v", err)
	}
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		path := filepath.Join(dir, "synced.tar")
		img := build(t, fixture.ImageSpec{Names: []string{"e2e.local/syncorder/app:1"}, Layers: fixture.UniformLayers(6, 1<<20, true, 70)})
		writeArchive(t, path, fixture.None, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
			return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerd}, img)
		})
		trace := filepath.Join(dir, "trace")
		out, err := exec.Command(strace, "-f", "-y", "-o", trace, "-e", "trace=fsync,fdatasync,linkat,link",
			holdfastBin, "import", "--address", d.Address, "--data-dir", filepath.Join(dir, "data"), "--write-path=direct", path).CombinedOutput()
		if err != nil {
			t.Fatalf("import under strace: %v\n%s", err, out)
		}
		b, err := os.ReadFile(trace)
		if err != nil {
			t.Fatal(err)
		}
		blobs := filepath.Join(directContentRoot(t, d), "blobs", "sha256")
		synced := map[string]bool{}
		links, dirSyncs, unsyncedLinks := 0, 0, 0
		for _, line := range strings.Split(string(b), "\n") {
			switch {
			case strings.Contains(line, "fsync(") || strings.Contains(line, "fdatasync("):
				if i, j := strings.Index(line, "<"), strings.Index(line, ">"); i >= 0 && j > i {
					p := line[i+1 : j]
					synced[p] = true
					if p == blobs {
						dirSyncs++
						unsyncedLinks = 0
					}
				}
			case strings.Contains(line, "link") && strings.Contains(line, blobs+"/"):
				if strings.Contains(line, "EEXIST") {
					continue
				}
				links++
				unsyncedLinks++
				q := strings.Index(line, "\"")
				r := strings.Index(line[q+1:], "\"")
				if q < 0 || r < 0 {
					t.Fatalf("cannot read %q", line)
				}
				if src := line[q+1 : q+1+r]; !synced[src] {
					t.Errorf("%s was linked before it was synced", src)
				}
			}
		}
		if links == 0 {
			t.Fatalf("no blob was linked into %s:\n%s", blobs, b)
		}
		if dirSyncs == 0 || unsyncedLinks != 0 {
			t.Errorf("%d links into %s, %d syncs of it, %d links after the last sync", links, blobs, dirSyncs, unsyncedLinks)
		}
		t.Logf("%d links into %s, %d syncs of it", links, blobs, dirSyncs)
	})
}

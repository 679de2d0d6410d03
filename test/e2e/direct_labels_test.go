package e2e

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// TestDirectWritePathLabelsInOnePass: blobs written directly are recorded
// with their distribution source labels at commit, after the walk; a layer
// three archives of one pass share (imported in parallel) names every
// repository, and every other blob its own, as on the stream path.
func TestDirectWritePathLabelsInOnePass(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		shared := sharedLayer(t, 4242)
		var imgs []*fixture.Image
		for i, repo := range []string{"team/a", "team/b", "team/c"} {
			im := build(t, fixture.ImageSpec{Names: []string{fmt.Sprintf("docker.io/%s:1", repo)},
				Layers: fixture.UniformLayers(3, 32<<10, false, int64(100+i)), SharedLayers: []*fixture.Layer{shared}})
			imgs = append(imgs, im)
			p := filepath.Join(imagesDir, fmt.Sprintf("%d.tar", i))
			if i == 1 {
				writeDockerSave(t, p, im)
				continue
			}
			writeArchive(t, p, fixture.None, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
				return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerd}, im)
			})
		}
		res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--write-path=direct", "--log-level=debug")
		if res.Code != 0 {
			t.Fatalf("sync exited %d\nstderr:\n%s", res.Code, res.Stderr)
		}
		placed := 0
		for _, n := range directPlaced(t, res.Stderr) {
			placed += n
		}
		if placed < 3*3 {
			t.Errorf("%d blobs written directly; want at least the 9 own layers", placed)
		}
		for i, im := range imgs {
			rec, ok := d.record(t, im.Names[0])
			if !ok {
				t.Fatalf("no record for %s", im.Names[0])
			}
			own := []string{"team/a", "team/b", "team/c"}[i]
			for _, desc := range d.hostBlobs(t, rec.Target) {
				want := own
				if desc.Digest == shared.Digest() {
					want = "team/a,team/b,team/c"
				}
				if got := d.criBlobLabels(t, desc.Digest)[criSourceKey]; got != want {
					t.Errorf("%s %s %s: %s=%q; want %q", im.Names[0], desc.MediaType, desc.Digest, criSourceKey, got, want)
				}
			}
		}
	})
}

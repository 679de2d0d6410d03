package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// TestKeptSourceLostContentFails: a kept source whose archive is gone and
// one of whose layers is deleted from the store (`ctr content rm`) cannot be
// restored by anything: sync exits 1 naming the source, the image and the
// missing blob; status marks the source and the image; the agent's /report
// lists it as failing. Importing the file again restores it and clears it.
func TestKeptSourceLostContentFails(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		if err := os.MkdirAll(imagesDir, 0o755); err != nil {
			t.Fatal(err)
		}
		img := build(t, fixture.ImageSpec{Names: []string{"e2e.local/lost/app:1"}, Layers: fixture.UniformLayers(2, 64<<10, false, 21)})
		archive := filepath.Join(dir, "kept.tar")
		writeDockerSave(t, archive, img)
		backup, err := os.ReadFile(archive)
		if err != nil {
			t.Fatal(err)
		}
		d.keepImportOK(t, dataDir, archive)
		if err := os.Remove(archive); err != nil {
			t.Fatal(err)
		}
		layer := img.ManifestFor(fixture.HostPlatform()).Layers[1].Digest()
		if err := d.Client.ContentStore().Delete(d.ctx(), layer); err != nil {
			t.Fatalf("deleting layer %s: %v", layer, err)
		}

		res := d.sync(t, dataDir, imagesDir)
		errs := errorLines(res.Stderr)
		if res.Code != 1 || len(errs) != 1 || !strings.Contains(errs[0], archive) || !strings.Contains(errs[0], "e2e.local/lost/app:1") ||
			!strings.Contains(errs[0], layer.String()) || !strings.Contains(errs[0], "content lost") {
			t.Errorf("sync exited %d with errors %q; want 1 and one error naming %s, the image and %s\n%s", res.Code, errs, archive, layer, tail(res.Stderr, 10))
		}

		st := holdfast(t, "status", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "-o", "json")
		var status struct {
			Images []struct {
				Name        string `json:"name"`
				ContentLost bool   `json:"contentLost"`
			} `json:"images"`
			Sources []struct {
				Path    string   `json:"path"`
				Missing []string `json:"missing"`
			} `json:"sources"`
		}
		if err := json.Unmarshal([]byte(st.Stdout), &status); err != nil {
			t.Fatalf("status -o json: %v\n%s", err, st.Stdout)
		}
		marked := false
		for _, s := range status.Sources {
			if s.Path == archive {
				marked = len(s.Missing) == 1 && s.Missing[0] == layer.String()
			}
		}
		for _, im := range status.Images {
			if im.Name == "e2e.local/lost/app:1" && !im.ContentLost {
				marked = false
			}
		}
		if !marked {
			t.Errorf("status does not mark %s missing %s, and its image as lost:\n%s", archive, layer, st.Stdout)
		}
		table := holdfast(t, "status", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir)
		if !strings.Contains(table.Stdout, "(content lost)") || !strings.Contains(table.Stdout, "lost (1 blobs missing") {
			t.Errorf("status's table does not say the content is lost:\n%s", table.Stdout)
		}

		if d.Name == "embedded" {
			agent := startAgent(t, d, dataDir, []string{imagesDir})
			eventually(t, "/report failing the kept source", func() bool {
				code, body := agent.get(t, "/report")
				var r reportJSON
				return code == 200 && json.Unmarshal([]byte(body), &r) == nil && len(r.Failing) == 1 &&
					r.Failing[0].Source == archive && strings.Contains(r.Failing[0].Error, layer.String())
			})
			agent.stop(t)
		}

		// The file comes back and is imported again: restored, no failure.
		if err := os.WriteFile(archive, backup, 0o644); err != nil {
			t.Fatal(err)
		}
		d.keepImportOK(t, dataDir, archive)
		if res := d.sync(t, dataDir, imagesDir); res.Code != 0 {
			t.Errorf("sync after the import again exited %d\n%s", res.Code, tail(res.Stderr, 10))
		}
		d.requirePinned(t, "e2e.local/lost/app:1")
	})
}

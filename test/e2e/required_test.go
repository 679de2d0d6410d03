package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/report"
)

// TestRequiredImagesUnderRun: holdfast run takes the set of images the
// node's workloads need (PUT /required, as the reporter sends it) and
// judges it against containerd: the report says which are missing or
// unpinned, holdfast_required_images counts them, an Event names each; an
// archive of the missing image dropped into the images dir, and a pin of
// the unpinned one, turn the set ready, with an ImageReady Event each.
func TestRequiredImagesUnderRun(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		pinned := build(t, fixture.ImageSpec{Names: []string{"e2e.local/required/pinned:1"}})
		missing := build(t, fixture.ImageSpec{Names: []string{"e2e.local/required/missing:1"}})
		loose := build(t, fixture.ImageSpec{Names: []string{"e2e.local/required/loose:1"}})
		writeDockerSave(t, filepath.Join(imagesDir, "pinned.tar"), pinned)
		keepCtrImport(t, d, loose) // a record, no pin
		a := startAgent(t, d, dataDir, []string{imagesDir})
		eventually(t, "the first pass", func() bool { return d.isPinned(t, pinned.Names[0]) })

		body := `{"images":[{"ref":"` + pinned.Names[0] + `","usedBy":["Deployment shop/a containers/a"]},` +
			`{"ref":"` + missing.Names[0] + `","usedBy":["Deployment shop/b containers/b"]},` +
			`{"ref":"` + loose.Names[0] + `","usedBy":["StatefulSet shop/c containers/c"]}]}`
		a.put(t, "/required", body)
		report := func() report.Report {
			_, b := a.get(t, "/report")
			var r report.Report
			if err := json.Unmarshal([]byte(b), &r); err != nil {
				t.Fatalf("decoding /report: %v\n%s", err, b)
			}
			return r
		}
		r := report().Required
		if r == nil || !r.Known || r.Ready || r.Counts["pinned"] != 1 || r.Counts["missing"] != 1 || r.Counts["present"] != 1 {
			t.Fatalf("required %+v, want 1 pinned, 1 missing, 1 present", r)
		}
		for state, n := range map[string]float64{"pinned": 1, "missing": 1, "present": 1, "mismatch": 0} {
			if got := a.metric(t, "holdfast_required_images", map[string]string{"state": state}); got != n {
				t.Errorf("holdfast_required_images{state=%q} = %v, want %v", state, got, n)
			}
		}
		events := func(reason, part string) bool {
			for _, e := range report().Events {
				if e.Reason == reason && strings.Contains(e.Message, part) {
					return true
				}
			}
			return false
		}
		if !events("ImageMissing", missing.Names[0]+" (Deployment shop/b containers/b)") || !events("ImageUnpinned", loose.Names[0]) {
			t.Errorf("no ImageMissing/ImageUnpinned events naming the images: %+v", report().Events)
		}

		// The missing image arrives in an archive; the loose one is pinned
		// by hand. Both are seen without a new set.
		writeDockerSave(t, filepath.Join(imagesDir, "missing.tar"), missing)
		if res := holdfast(t, "pin", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, loose.Names[0]); res.Code != 0 {
			t.Fatalf("holdfast pin exited %d\n%s", res.Code, res.Stderr)
		}
		eventually(t, "the set to be ready", func() bool { return report().Required.Ready })
		if !events("ImageReady", missing.Names[0]) || !events("ImageReady", loose.Names[0]) {
			t.Errorf("no ImageReady events: %+v", report().Events)
		}
		if got := a.metric(t, "holdfast_required_images", map[string]string{"state": "pinned"}); got != 3 {
			t.Errorf("holdfast_required_images{state=pinned} = %v, want 3", got)
		}
	})
}

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// TestPlanMatchesSync: `holdfast plan` changes nothing (no image event while it
// runs), and the names it says a sync would pin, heal or unpin are exactly the
// names whose pin state the next sync changes.
func TestPlanMatchesSync(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	a := build(t, fixture.ImageSpec{Names: []string{"e2e.local/plan/a:1"}})
	b := build(t, fixture.ImageSpec{Names: []string{"e2e.local/plan/b:1", "e2e.local/plan/b:2"}})
	writeDockerSave(t, filepath.Join(imagesDir, "a.tar"), a)
	writeDockerSave(t, filepath.Join(imagesDir, "b.tar"), b)
	d.syncOK(t, dataDir, imagesDir)

	// a's archive deleted; b deleted with crictl rmi.
	if err := os.Remove(filepath.Join(imagesDir, "a.tar")); err != nil {
		t.Fatal(err)
	}
	d.crictl(t, "rmi", "e2e.local/plan/b:1")
	before := map[string]bool{}
	for _, n := range d.recordNames(t) {
		cri, hf := d.pinnedBy(t, n)
		before[n] = cri && hf
	}
	w := watchImages(t, d, a.Target)

	res := holdfast(t, "plan", "-o", "json", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir)
	if res.Code != 0 {
		t.Fatalf("plan: %d %s", res.Code, res.Stderr)
	}
	if evs := w.flush(t); len(evs) != 0 {
		t.Errorf("plan caused image events: %v", evs)
	}
	var plan struct {
		Actions []struct {
			Action, Name, Lease, Reason string
		} `json:"actions"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &plan); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, res.Stdout)
	}
	planned := map[string]bool{}
	releases := 0
	for _, a := range plan.Actions {
		switch a.Action {
		case "pin", "heal", "unpin":
			planned[a.Name] = true
		case "release":
			releases++
		}
	}
	if releases != 1 {
		t.Errorf("plan releases %d leases, want 1: %+v", releases, plan.Actions)
	}

	c := d.syncOK(t, dataDir, imagesDir)
	observed := pinChanges(before, w.flush(t))
	if !equalSets(planned, observed) {
		t.Errorf("plan named %v, the sync changed %v", keys(planned), keys(observed))
	}
	if c["released"] != releases {
		t.Errorf("plan said %d releases, sync did %d", releases, c["released"])
	}
	if len(planned) < 4 {
		t.Errorf("plan too small to mean anything: %v", keys(planned))
	}
}

func equalSets(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

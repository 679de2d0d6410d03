package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
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

// TestPlanAgreesWithSync: on a node with a replaced archive, a broken one, a
// file just written, a spool archive and an images dir that looks unmounted
// (emptied, no marker, its leases still there), what `holdfast plan` lists is
// exactly what the next sync does: the same imports (and the one that
// fails), the same spool file removed, the same names pinned, healed or
// unpinned, the same leases released. plan changes nothing on the way.
func TestPlanAgreesWithSync(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	base := filepath.Dir(imagesDir)
	other, spoolDir := filepath.Join(base, "other"), filepath.Join(base, "spool")
	for _, dir := range []string{imagesDir, other, spoolDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	replaced := filepath.Join(imagesDir, "app.tar")
	writeDockerSave(t, replaced, build(t, fixture.ImageSpec{Names: []string{"e2e.local/agree/app:1", "e2e.local/agree/old:1"}}))
	stays := build(t, fixture.ImageSpec{Names: []string{"e2e.local/agree/stays:1"}})
	writeDockerSave(t, filepath.Join(imagesDir, "stays.tar"), stays)
	gone := filepath.Join(other, "gone.tar")
	writeDockerSave(t, gone, build(t, fixture.ImageSpec{Names: []string{"e2e.local/agree/gone:1"}}))
	d.syncOK(t, dataDir, imagesDir, other)

	// The other dir looks unmounted: its archive and its marker gone.
	for _, p := range []string{gone, filepath.Join(other, ".holdfast-images")} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	writeDockerSave(t, replaced, build(t, fixture.ImageSpec{Names: []string{"e2e.local/agree/app:2", "e2e.local/agree/app:1"}, Layers: fixture.UniformLayers(1, 32<<10, false, 91)}))
	broken := filepath.Join(imagesDir, "broken.tar")
	writeDockerSave(t, broken, build(t, fixture.ImageSpec{Names: []string{"e2e.local/agree/broken:1"}}))
	if fi, err := os.Stat(broken); err != nil {
		t.Fatal(err)
	} else if err := os.Truncate(broken, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	writeDockerSave(t, filepath.Join(imagesDir, "fresh.tar"), build(t, fixture.ImageSpec{Names: []string{"e2e.local/agree/fresh:1"}}))
	spooled := filepath.Join(spoolDir, "spooled.tar")
	writeDockerSave(t, spooled, build(t, fixture.ImageSpec{Names: []string{"e2e.local/agree/spooled:1"}}))

	args := []string{"--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--images", other, "--spool", spoolDir}
	before := d.pinState(t)
	leasesBefore := stopLeaseIDs(t, d)
	w := watchImages(t, d, stays.Target)

	res := holdfast(t, append([]string{"plan", "-o", "json"}, args...)...)
	if res.Code != 0 {
		t.Fatalf("plan: %d %s", res.Code, res.Stderr)
	}
	if evs := w.flush(t); len(evs) != 0 {
		t.Errorf("plan caused image events: %v", evs)
	}
	if after := stopLeaseIDs(t, d); !slices.Equal(after, leasesBefore) {
		t.Errorf("plan changed the leases: %v, then %v", leasesBefore, after)
	}
	if _, err := os.Stat(spooled); err != nil {
		t.Errorf("plan removed the spool file: %v", err)
	}
	var plan struct {
		Actions []struct {
			Action, Name, Lease, Source, Reason, Error string
		} `json:"actions"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &plan); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, res.Stdout)
	}
	imports, failing, removes, names, releases := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, a := range plan.Actions {
		switch a.Action {
		case "import":
			imports[a.Source] = true
			if a.Error != "" {
				failing[a.Source] = true
			}
		case "remove":
			removes[a.Source] = true
		case "pin", "heal", "unpin":
			names[a.Name] = true
		case "release":
			releases[a.Lease] = true
		}
	}

	sync := runHoldfast(t, exec.Command(holdfastBin, append([]string{"sync", "--log-format", "json"}, args...)...))
	if sync.Code != 1 {
		t.Fatalf("sync exited %d, want 1 (the broken archive, the unmounted-looking dir)\n%s", sync.Code, tail(sync.Stderr, 20))
	}
	did := map[string]map[string]bool{"import": {}, "fail": {}, "remove": {}, "release": {}}
	for _, line := range strings.Split(sync.Stderr, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			if p, ok := strings.CutPrefix(line, "error: import "); ok {
				path, _, _ := strings.Cut(p, ":")
				did["import"][path], did["fail"][path] = true, true
			}
			continue
		}
		switch m["msg"] {
		case "imported", "imported from spool":
			did["import"][fmt.Sprint(m["path"])] = true
		case "released":
			did["release"][fmt.Sprint(m["lease"])] = true
		}
	}
	for _, line := range strings.Split(sync.Stdout, "\n") {
		if p, ok := strings.CutPrefix(line, "spool: "); ok {
			did["remove"][strings.TrimSuffix(p, " imported, kept and removed")] = true
		}
	}
	// A name is acted on when its record's pin state or target changed.
	observed := map[string]bool{}
	after := d.pinState(t)
	for n, st := range after {
		if before[n] != st {
			observed[n] = true
		}
	}
	for n := range before {
		if _, ok := after[n]; !ok {
			observed[n] = true
		}
	}
	for _, c := range []struct {
		what         string
		plan, synced map[string]bool
	}{
		{"imports", imports, did["import"]},
		{"failing imports", failing, did["fail"]},
		{"spool files removed", removes, did["remove"]},
		{"names pinned, healed or unpinned", names, observed},
		{"leases released", releases, did["release"]},
	} {
		if !equalSets(c.plan, c.synced) {
			t.Errorf("%s: plan %v, sync %v", c.what, keys(c.plan), keys(c.synced))
		}
	}
	// What the scene is for: each hard case is in it.
	for _, p := range []string{replaced, broken, filepath.Join(imagesDir, "fresh.tar"), spooled} {
		if !imports[p] {
			t.Errorf("plan does not import %s: %+v", p, plan.Actions)
		}
	}
	if !failing[broken] || len(failing) != 1 || !removes[spooled] || len(releases) != 1 || !names["e2e.local/agree/old:1"] || names["e2e.local/agree/gone:1"] {
		t.Errorf("plan: failing %v, removes %v, releases %v, names %v; want broken.tar failing, the spool file removed, app.tar's old lease released, old:1 unpinned and gone:1 kept",
			keys(failing), keys(removes), keys(releases), keys(names))
	}
}

// pinState is, for each record but the CRI's own and the watch's sentinels,
// whether both pin labels are on it and its target.
func (d *daemon) pinState(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range d.recordNames(t) {
		if strings.HasPrefix(n, "sha256:") || strings.HasPrefix(n, "e2e.local/sentinel") {
			continue
		}
		rec, ok := d.record(t, n)
		if !ok {
			continue
		}
		cri, hf := d.pinnedBy(t, n)
		out[n] = fmt.Sprintf("%v %s", cri && hf, rec.Target.Digest)
	}
	return out
}

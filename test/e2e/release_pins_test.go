package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// TestReleaseKeepsWhatAFreshPinWants: `holdfast pin` writes a pattern, and
// no pass has taken it in yet (no lease says the pin list wants anything),
// when the kept source that brought the image is released: the image stays
// pinned, as the pin list wants it now; the other image of that source,
// which nothing wants, is unpinned.
func TestReleaseKeepsWhatAFreshPinWants(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		dataDir := filepath.Join(dir, "data")
		fresh := build(t, fixture.ImageSpec{Names: []string{"e2e.local/fresh/app:1"}})
		lone := build(t, fixture.ImageSpec{Names: []string{"e2e.local/fresh/lone:1"}})
		archive := filepath.Join(dir, "app.tar")
		writeDockerSave(t, archive, fresh, lone)
		d.keepImportOK(t, dataDir, archive)
		d.requirePinned(t, "e2e.local/fresh/app:1", "e2e.local/fresh/lone:1")

		if res := holdfast(t, "pin", "--data-dir", dataDir, "e2e.local/fresh/app"); res.Code != 0 {
			t.Fatalf("pin exited %d: %s", res.Code, res.Stderr)
		}
		res := holdfast(t, "release", "--address", d.Address, "--data-dir", dataDir, "--dry-run", archive)
		if res.Code != 0 || strings.Contains(res.Stdout, "app:1") || !strings.Contains(res.Stdout, "would unpin e2e.local/fresh/lone:1") {
			t.Errorf("release --dry-run exited %d, said:\n%s\nwant lone:1 unpinned and app:1 not\n%s", res.Code, res.Stdout, res.Stderr)
		}
		res = holdfast(t, "release", "--address", d.Address, "--data-dir", dataDir, archive)
		if res.Code != 0 {
			t.Fatalf("release exited %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
		}
		if strings.Contains(res.Stdout, "unpinned e2e.local/fresh/app:1") {
			t.Errorf("release says it unpinned what the pin list wants:\n%s", res.Stdout)
		}
		d.requirePinned(t, "e2e.local/fresh/app:1")
		d.keepRequireUnpinned(t, "e2e.local/fresh/lone:1")
		if _, ok := d.keepLeaseOf(t, archive); ok {
			t.Error("the kept lease is still there")
		}
	})
}

// TestReleaseUnderRunKeepsAFreshPin is the same beside a running agent: the
// pin and the release come at once, before the agent's pass has read the new
// pattern. containerd's image events show the image never loses a pin label
// (nor its record) on the way, while the source's other image is unpinned.
func TestReleaseUnderRunKeepsAFreshPin(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	fresh := build(t, fixture.ImageSpec{Names: []string{"e2e.local/freshrun/app:1"}})
	lone := build(t, fixture.ImageSpec{Names: []string{"e2e.local/freshrun/lone:1"}})
	archive := filepath.Join(filepath.Dir(dataDir), "app.tar")
	writeDockerSave(t, archive, fresh, lone)
	agent := startAgent(t, d, dataDir, []string{imagesDir})
	eventually(t, "the agent ready", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })
	d.keepImportOK(t, dataDir, archive)
	d.requirePinned(t, "e2e.local/freshrun/app:1", "e2e.local/freshrun/lone:1")
	rec, _ := d.record(t, "e2e.local/freshrun/app:1")
	w := watchImages(t, d, rec.Target)

	if res := holdfast(t, "pin", "--data-dir", dataDir, "e2e.local/freshrun/app"); res.Code != 0 {
		t.Fatalf("pin exited %d: %s", res.Code, res.Stderr)
	}
	res := holdfast(t, "release", "--address", d.Address, "--data-dir", dataDir, archive)
	if res.Code != 0 {
		t.Fatalf("release exited %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	defer func() {
		if t.Failed() {
			t.Logf("release said:\n%s\nthe agent logged:\n%s", res.Stdout, agent.dump())
		}
	}()
	eventually(t, "lone:1 unpinned", func() bool { cri, hf := d.pinnedBy(t, "e2e.local/freshrun/lone:1"); return !cri && !hf })
	// A pass that starts after the release: another pin (the agent watches
	// <data-dir>/pins) starts one.
	passes := agent.logged("pass: ", nil)
	if res := holdfast(t, "pin", "--data-dir", dataDir, "e2e.local/freshrun/nothing"); res.Code != 0 {
		t.Fatalf("pin exited %d: %s", res.Code, res.Stderr)
	}
	eventually(t, "a pass of the agent after the release", func() bool { return agent.logged("pass: ", nil) > passes })
	eventually(t, "lone:1 still unpinned", func() bool { cri, hf := d.pinnedBy(t, "e2e.local/freshrun/lone:1"); return !cri && !hf })
	for _, ev := range w.flush(t) {
		if !strings.HasPrefix(ev.Name, "e2e.local/freshrun/app") {
			continue
		}
		if ev.Kind == "delete" || ev.Labels["io.cri-containerd.pinned"] != "pinned" || ev.Labels["io.holdfast.pinned"] != "pinned" {
			t.Errorf("%s %s with labels %v: the image lost its pin on the way", ev.Kind, ev.Name, ev.Labels)
		}
	}
	d.requirePinned(t, "e2e.local/freshrun/app:1")
}

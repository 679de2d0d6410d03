package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/leases"

	"github.com/holdfast-project/holdfast/internal/embedded"
	"github.com/holdfast-project/holdfast/internal/fixture"
)

// keepImport runs `holdfast import` against d.
func (d *daemon) keepImport(t *testing.T, dataDir string, paths ...string) result {
	t.Helper()
	return holdfast(t, append([]string{"import", "--address", d.Address, "--data-dir", dataDir}, paths...)...)
}

// keepImportOK runs `holdfast import` and fails the test unless it exits 0.
func (d *daemon) keepImportOK(t *testing.T, dataDir string, paths ...string) string {
	t.Helper()
	res := d.keepImport(t, dataDir, paths...)
	if res.Code != 0 {
		t.Fatalf("import exited %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// keepLeaseOf is the kept lease imported from path.
func (d *daemon) keepLeaseOf(t *testing.T, path string) (leases.Lease, bool) {
	t.Helper()
	for _, l := range d.holdfastLeases(t) {
		if l.Labels["io.holdfast.source"] == "kept:"+path && l.Labels["io.holdfast.kept"] == "true" {
			return l, true
		}
	}
	return leases.Lease{}, false
}

// keepRequireUnpinned fails unless name carries neither pin label.
func (d *daemon) keepRequireUnpinned(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if cri, hf := d.pinnedBy(t, n); cri || hf {
			t.Errorf("%s: CRI pin %v, holdfast pin %v; want neither", n, cri, hf)
		}
	}
}

// keepCtrImport imports img as ctr does, without holdfast.
func keepCtrImport(t *testing.T, d *daemon, img *fixture.Image) {
	t.Helper()
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(fixture.WriteOCI(context.Background(), pw, fixture.OCIOptions{Names: fixture.NameContainerd}, img))
	}()
	if _, err := d.Client.Import(d.ctx(), pr); err != nil {
		t.Fatalf("importing %v: %v", img.Names, err)
	}
}

// keepStatus is the part of `status -o json` about sources.
type keepStatus struct {
	Sources []struct {
		Path       string `json:"path"`
		Lease      string `json:"lease"`
		Kept       bool   `json:"kept"`
		ImportedAt string `json:"importedAt"`
		Size       int64  `json:"size"`
		Images     int    `json:"images"`
	} `json:"sources"`
}

func keepReadStatus(t *testing.T, args ...string) keepStatus {
	t.Helper()
	var st keepStatus
	readStatus(t, &st, args...)
	return st
}

// TestImportKeepsAfterArchiveDeleted is the K3s workflow: copy an archive
// onto the node, import it, delete it to get the disk back. Nothing is
// unpinned by a later sync, and heal still works from the leased content.
// On both write paths.
func TestImportKeepsAfterArchiveDeleted(t *testing.T) {
	forEachLineAndPath(t, func(t *testing.T, d *daemon, wp string) {
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		dataDir := filepath.Join(dir, "data")
		drop := filepath.Join(dir, "drop")
		x := build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/x:1"}})
		y := build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/y:1"}})
		z := build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/z:1"}})
		pathX := filepath.Join(drop, "x.tar")
		writeDockerSave(t, pathX, x)
		// y is in an images dir and imported as kept too: deleting its file
		// releases the images dir's lease, not the kept one.
		pathY := filepath.Join(imagesDir, "y.tar")
		writeDockerSave(t, pathY, y)
		writeDockerSave(t, filepath.Join(imagesDir, "z.tar"), z)
		_, log := d.wpSyncOK(t, wp, dataDir, imagesDir)
		wpRequirePlaced(t, wp, log, pathY, filepath.Join(imagesDir, "z.tar"))

		out, log := d.wpImportOK(t, wp, dataDir, pathX, pathY)
		wpRequirePlaced(t, wp, log, pathX)
		if !strings.Contains(out, pathX+": imported and kept") {
			t.Errorf("import output does not report x.tar kept:\n%s", out)
		}
		d.requirePinned(t, "e2e.local/keep/x:1", "e2e.local/keep/y:1")
		l, ok := d.keepLeaseOf(t, pathX)
		if !ok {
			t.Fatalf("no kept lease for %s among %v", pathX, d.holdfastLeases(t))
		}
		if at, err := time.Parse(time.RFC3339, l.Labels["io.holdfast.imported-at"]); err != nil || time.Since(at) > time.Hour {
			t.Errorf("io.holdfast.imported-at = %q (%v)", l.Labels["io.holdfast.imported-at"], err)
		}

		// The same file again reads nothing.
		if out, _ := d.wpImportOK(t, wp, dataDir, pathX); !strings.Contains(out, pathX+": unchanged") {
			t.Errorf("a second import of the same file is not a no-op:\n%s", out)
		}

		if err := os.Remove(pathX); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(pathY); err != nil {
			t.Fatal(err)
		}
		c, _ := d.wpSyncOK(t, wp, dataDir, imagesDir)
		if c["unpinned"] != 0 || c["released"] != 1 {
			t.Errorf("sync after deleting the imported archives: %v (want 0 unpinned, y.tar's images-dir lease released)", c)
		}
		d.requirePinned(t, "e2e.local/keep/x:1", "e2e.local/keep/y:1", "e2e.local/keep/z:1")
		if _, ok := d.keepLeaseOf(t, pathX); !ok {
			t.Error("the kept lease of x.tar is gone after sync")
		}

		// Deleted by crictl rmi: the next sync heals it from the lease.
		d.crictl(t, "rmi", "e2e.local/keep/x:1")
		c, _ = d.wpSyncOK(t, wp, dataDir, imagesDir)
		if c["healed"] < 1 || c["bytes0"] != 1 {
			t.Errorf("heal of a kept image after crictl rmi: %v", c)
		}
		d.requirePinned(t, "e2e.local/keep/x:1")

		st := keepReadStatus(t, "--address", d.Address, "--data-dir", dataDir, wpFlag(wp))
		found := false
		for _, s := range st.Sources {
			if s.Path == pathX {
				found = true
				if !s.Kept || s.ImportedAt == "" || s.Size <= 0 || s.Images < 1 {
					t.Errorf("status source of x.tar: %+v", s)
				}
			}
		}
		if !found {
			t.Errorf("status lists no source %s: %+v", pathX, st.Sources)
		}
	})
}

// TestImportErrors: exit codes and messages as sync's.
func TestImportErrors(t *testing.T) {
	d, _, dataDir := embeddedScene(t)
	dir := filepath.Dir(dataDir)
	good := filepath.Join(dir, "good.tar")
	writeDockerSave(t, good, build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/good:1"}}))
	bad := filepath.Join(dir, "bad.tar")
	writeDockerSave(t, bad, build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/bad:1"}}))
	fi, err := os.Stat(bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(bad, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.tar")

	res := d.keepImport(t, dataDir, bad, good, missing)
	if res.Code != 1 {
		t.Fatalf("import of a truncated, a good and a missing file exited %d, want 1\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	for _, p := range []string{bad, missing} {
		if !strings.Contains(res.Stderr, "error: ") || !strings.Contains(res.Stderr, p) {
			t.Errorf("stderr does not name %s:\n%s", p, res.Stderr)
		}
	}
	d.requirePinned(t, "e2e.local/keep/good:1")
	if _, ok := d.keepLeaseOf(t, bad); ok {
		t.Error("a failed import left its lease")
	}
	if res := d.keepImport(t, dataDir); res.Code != 2 {
		t.Errorf("import without arguments exited %d, want 2", res.Code)
	}
}

// TestImportSurvivesLostDataDirAndRestart: that a source is kept lives on its
// lease in containerd: a lost data dir and a restarted containerd (same root)
// change nothing, and heal works after containerd's GC really ran.
func TestImportSurvivesLostDataDirAndRestart(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	root := tempDir(t)
	start := func() (*embedded.Process, *daemon) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p, err := embedded.Start(ctx, root, embedded.Options{Binary: holdfastBin})
		if err != nil {
			t.Fatalf("starting embedded containerd: %v", err)
		}
		return p, connect(t, "embedded", p.Address(), false)
	}
	stop := func(p *embedded.Process) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("stopping embedded containerd: %v", err)
		}
	}
	p, d := start()
	t.Cleanup(func() {
		if p != nil {
			stop(p)
		}
	})
	dir := tempDir(t)
	dataDir := filepath.Join(dir, "data")
	imagesDir := filepath.Join(dir, "images")
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	x := build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/lost:1"}})
	pathX := filepath.Join(dir, "x.tar")
	writeDockerSave(t, pathX, x)
	d.keepImportOK(t, dataDir, pathX)
	d.requirePinned(t, "e2e.local/keep/lost:1")

	if err := os.Remove(pathX); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dataDir); err != nil {
		t.Fatal(err)
	}
	d.Client.Close()
	stop(p)
	p = nil
	p, d = start()

	c := d.syncOK(t, dataDir, imagesDir)
	if c["unpinned"] != 0 || c["released"] != 0 {
		t.Errorf("sync after losing the data dir and restarting containerd: %v", c)
	}
	d.requirePinned(t, "e2e.local/keep/lost:1")

	// A synchronous delete: GC runs (an unleased control image deleted the
	// same way loses its blobs); the kept lease keeps the content.
	control := build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/control:1"}})
	keepCtrImport(t, d, control)
	controlLayer := control.Manifests[0].Layers[0].Digest()
	d.deleteImageSync(t, control.Target.Digest)
	rec, _ := d.record(t, "e2e.local/keep/lost:1")
	d.deleteImageSync(t, rec.Target.Digest)
	eventually(t, "GC to remove the control image's layer", func() bool { return !d.hasBlob(t, controlLayer) })
	c = d.syncOK(t, dataDir, imagesDir)
	if c["healed"] < 1 || c["bytes0"] != 1 {
		t.Errorf("heal after GC: %v", c)
	}
	d.requirePinned(t, "e2e.local/keep/lost:1")
	for _, b := range d.hostBlobs(t, rec.Target) {
		if !d.hasBlob(t, b.Digest) {
			t.Errorf("healed image lacks %s", b.Digest)
		}
	}
}

// TestImportEmbedded: without --address, import starts holdfast's embedded
// containerd in the data dir like sync; what it keeps survives the file.
func TestImportEmbedded(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	dir := tempDir(t)
	dataDir := filepath.Join(dir, "data")
	pathX := filepath.Join(dir, "x.tar")
	writeDockerSave(t, pathX, build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/emb:1"}}))
	if res := holdfast(t, "import", "--data-dir", dataDir, pathX); res.Code != 0 {
		t.Fatalf("import exited %d: %s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	if err := os.Remove(pathX); err != nil {
		t.Fatal(err)
	}
	if res := holdfast(t, "sync", "--data-dir", dataDir); res.Code != 0 {
		t.Fatalf("sync exited %d: %s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	res := holdfast(t, "status", "--data-dir", dataDir)
	if res.Code != 0 {
		t.Fatalf("status exited %d: %s", res.Code, res.Stderr)
	}
	if !strings.Contains(res.Stdout, "e2e.local/keep/emb:1") || !strings.Contains(res.Stdout, pathX+" (kept)") ||
		!strings.Contains(res.Stdout, "KEPT SOURCE") {
		t.Errorf("status after deleting the imported file:\n%s", res.Stdout)
	}
	for _, line := range strings.Split(res.Stdout, "\n") {
		if strings.HasPrefix(line, "e2e.local/keep/emb:1 ") && !strings.Contains(line, "holdfast") {
			t.Errorf("not pinned by holdfast: %q", line)
		}
	}
}

// TestRelease: release ends exactly one kept source: its lease goes, its
// images are unpinned but for those a pin list or another kept archive still
// wants, and a user's own pin stays.
func TestRelease(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) { keepReleaseScenario(t, d) })
}

func keepReleaseScenario(t *testing.T, d *daemon) {
	dir := tempDir(t)
	imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
	shared := sharedLayer(t, 11)
	only := build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/only:1"}, SharedLayers: []*fixture.Layer{shared}})
	listed := build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/listed:1"}})
	both := build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/both:1"}, SharedLayers: []*fixture.Layer{shared}})
	user := build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/user:1"}})
	other := build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/other:1"}})
	one := filepath.Join(dir, "one.tar")
	two := filepath.Join(dir, "two.tar")
	writeDockerSave(t, one, only, listed, both, user)
	writeDockerSave(t, two, both, other)
	// A user pinned user:1 before holdfast did.
	keepCtrImport(t, d, user)
	rec, _ := d.record(t, "e2e.local/keep/user:1")
	rec.Labels = map[string]string{"io.cri-containerd.pinned": "pinned"}
	if _, err := d.Client.ImageService().Update(d.ctx(), rec, "labels.io.cri-containerd.pinned"); err != nil {
		t.Fatal(err)
	}

	d.keepImportOK(t, dataDir, one, two)
	if res := holdfast(t, "pin", "--data-dir", dataDir, "e2e.local/keep/listed:1"); res.Code != 0 {
		t.Fatalf("pin exited %d: %s", res.Code, res.Stderr)
	}
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	d.syncOK(t, dataDir, imagesDir) // the pin list leases listed:1
	if err := os.Remove(one); err != nil {
		t.Fatal(err)
	}
	names := []string{"e2e.local/keep/only:1", "e2e.local/keep/listed:1", "e2e.local/keep/both:1", "e2e.local/keep/user:1", "e2e.local/keep/other:1"}
	d.requirePinned(t, names...)

	release := func(args ...string) result {
		return holdfast(t, append([]string{"release", "--address", d.Address, "--data-dir", dataDir}, args...)...)
	}
	res := release("--dry-run", one)
	if res.Code != 0 {
		t.Fatalf("release --dry-run exited %d: %s", res.Code, res.Stderr)
	}
	for _, want := range []string{"would release " + one, "would unpin e2e.local/keep/only:1", "would unpin e2e.local/keep/user:1"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("release --dry-run does not say %q:\n%s", want, res.Stdout)
		}
	}
	for _, not := range []string{"listed:1", "both:1", "other:1"} {
		if strings.Contains(res.Stdout, not) {
			t.Errorf("release --dry-run would unpin %s, which others want:\n%s", not, res.Stdout)
		}
	}
	d.requirePinned(t, names...)
	if _, ok := d.keepLeaseOf(t, one); !ok {
		t.Fatal("release --dry-run released the lease")
	}

	res = release(one)
	if res.Code != 0 {
		t.Fatalf("release exited %d: %s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	if _, ok := d.keepLeaseOf(t, one); ok {
		t.Error("the released source's lease is still there")
	}
	d.keepRequireUnpinned(t, "e2e.local/keep/only:1")
	for _, n := range d.recordNames(t) {
		if strings.HasPrefix(n, "e2e.local/keep/only@") {
			d.keepRequireUnpinned(t, n)
		}
	}
	d.requirePinned(t, "e2e.local/keep/listed:1", "e2e.local/keep/both:1", "e2e.local/keep/other:1")
	if cri, hf := d.pinnedBy(t, "e2e.local/keep/user:1"); !cri || hf {
		t.Errorf("user:1 after release: CRI pin %v (want the user's kept), holdfast pin %v (want gone)", cri, hf)
	}
	// A sync pins nothing of it again.
	if c := d.syncOK(t, dataDir, imagesDir); c["healed"] != 0 {
		t.Errorf("sync after release healed something: %v", c)
	}
	d.keepRequireUnpinned(t, "e2e.local/keep/only:1")

	// By pattern: the other kept source goes too, and with it what only it wanted.
	if res := release("e2e.local/keep/other*"); res.Code != 0 {
		t.Fatalf("release by pattern exited %d: %s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	d.keepRequireUnpinned(t, "e2e.local/keep/other:1", "e2e.local/keep/both:1")
	d.requirePinned(t, "e2e.local/keep/listed:1")

	if res := release("e2e.local/keep/nothing*"); res.Code != 1 || !strings.Contains(res.Stderr, "nothing") {
		t.Errorf("release of nothing kept exited %d, want 1 naming it: %s", res.Code, res.Stderr)
	}
	if res := release("Bad Pattern!"); res.Code != 2 {
		t.Errorf("release of a bad pattern exited %d, want 2: %s", res.Code, res.Stderr)
	}
}

// TestUnfinishedKeptImportIsNotStale: a pass never releases a young,
// unfinished kept lease (an import in flight in another process), while an
// unfinished images-dir lease is still released as stale.
func TestUnfinishedKeptImportIsNotStale(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The dir is empty on purpose: its leases may be judged.
	if err := os.WriteFile(filepath.Join(imagesDir, ".holdfast-images"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ls := d.Client.LeasesService()
	inFlight := "holdfast/kept-inflight"
	if _, err := ls.Create(d.ctx(), leases.WithID(inFlight), leases.WithLabels(map[string]string{
		"io.holdfast.source": filepath.Join(imagesDir, "in-flight.tar"), "io.holdfast.kept": "true",
	})); err != nil {
		t.Fatal(err)
	}
	crashed := "holdfast/crashed"
	if _, err := ls.Create(d.ctx(), leases.WithID(crashed), leases.WithLabels(map[string]string{
		"io.holdfast.source": filepath.Join(imagesDir, "crashed.tar"),
	})); err != nil {
		t.Fatal(err)
	}
	d.syncOK(t, dataDir, imagesDir)
	has := map[string]bool{}
	for _, l := range d.holdfastLeases(t) {
		has[l.ID] = true
	}
	if !has[inFlight] {
		t.Error("a pass released an unfinished kept import in flight")
	}
	if has[crashed] {
		t.Error("a pass kept an unfinished images-dir lease (it was released as stale before)")
	}
}

// TestImportBesideAgent: with holdfast run owning the data dir, import and
// release attach to it; the agent takes the kept source in (heals it, keeps
// it when its file is gone) and does not pin a released one again.
func TestImportBesideAgent(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	dir := filepath.Dir(dataDir)
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	agent := startAgent(t, d, dataDir, []string{imagesDir})
	eventually(t, "ready", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })

	passes := func() int { return agent.logged("pass:", nil) }
	before := passes()
	pathX := filepath.Join(dir, "x.tar")
	writeDockerSave(t, pathX, build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/agent:1"}}))
	// No --address: import finds the agent through the data dir.
	if res := holdfast(t, "import", "--data-dir", dataDir, pathX); res.Code != 0 {
		t.Fatalf("import beside the agent exited %d: %s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	d.requirePinned(t, "e2e.local/keep/agent:1")
	if err := os.Remove(pathX); err != nil {
		t.Fatal(err)
	}
	// The import's pins bring on a pass, which takes the kept source in:
	// from then on the agent heals it.
	eventually(t, "a pass after the import", func() bool { return passes() > before })
	d.crictl(t, "rmi", "e2e.local/keep/agent:1")
	d.waitPinned(t, "e2e.local/keep/agent:1")

	// A pass brought on by a new archive keeps it, its file gone.
	writeDockerSave(t, filepath.Join(imagesDir, "dir.tar"), build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/dir:1"}}))
	d.waitPinned(t, "e2e.local/keep/dir:1")
	d.requirePinned(t, "e2e.local/keep/agent:1")

	before = passes()
	if res := holdfast(t, "release", "--data-dir", dataDir, pathX); res.Code != 0 {
		t.Fatalf("release beside the agent exited %d: %s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	d.keepRequireUnpinned(t, "e2e.local/keep/agent:1")
	// The unpin brings on a pass; after it, and after one more, the name is
	// still unpinned.
	eventually(t, "a pass after the release", func() bool { return passes() > before })
	writeDockerSave(t, filepath.Join(imagesDir, "dir2.tar"), build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/dir2:1"}}))
	d.waitPinned(t, "e2e.local/keep/dir2:1")
	d.keepRequireUnpinned(t, "e2e.local/keep/agent:1")
	d.requirePinned(t, "e2e.local/keep/dir:1")
}

// TestImportReplacesChangedFile: importing a changed file at the same path
// replaces the earlier kept import: the new content is pinned, the earlier
// lease released, and what only it wanted unpinned.
func TestImportReplacesChangedFile(t *testing.T) {
	d, _, dataDir := embeddedScene(t)
	path := filepath.Join(filepath.Dir(dataDir), "app.tar")
	v1 := build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/app:1", "e2e.local/keep/app:stable"}})
	writeDockerSave(t, path, v1)
	d.keepImportOK(t, dataDir, path)
	first, ok := d.keepLeaseOf(t, path)
	if !ok {
		t.Fatal("no kept lease after the first import")
	}
	before, _ := d.record(t, "e2e.local/keep/app:stable")
	v2 := build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/app:2", "e2e.local/keep/app:stable"}})
	writeDockerSave(t, path, v2)
	out := d.keepImportOK(t, dataDir, path)
	if !strings.Contains(out, "replaced the earlier import (lease "+first.ID+")") || !strings.Contains(out, "unpinned e2e.local/keep/app:1") {
		t.Errorf("import of the changed file:\n%s", out)
	}
	var kept []string
	for _, l := range d.holdfastLeases(t) {
		if l.Labels["io.holdfast.kept"] == "true" {
			kept = append(kept, l.ID)
		}
	}
	if len(kept) != 1 || kept[0] == first.ID {
		t.Errorf("kept leases after the replace: %v (first was %s)", kept, first.ID)
	}
	d.requirePinned(t, "e2e.local/keep/app:2", "e2e.local/keep/app:stable")
	d.keepRequireUnpinned(t, "e2e.local/keep/app:1")
	stable, _ := d.record(t, "e2e.local/keep/app:stable")
	app2, _ := d.record(t, "e2e.local/keep/app:2")
	if stable.Target.Digest != app2.Target.Digest || stable.Target.Digest == before.Target.Digest {
		t.Errorf("app:stable points at %s, want the new import's %s", stable.Target.Digest, app2.Target.Digest)
	}
}

// TestSpoolSync: an archive dropped into a spool dir is imported as a kept
// source and deleted once pinned and leased; a truncated one stays in place
// with an error naming it.
func TestSpoolSync(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		dataDir := filepath.Join(dir, "data")
		spoolDir := filepath.Join(dir, "spool")
		good := filepath.Join(spoolDir, "good.tar")
		writeDockerSave(t, good, build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/spool:1"}}))
		bad := filepath.Join(spoolDir, "bad.tar")
		writeDockerSave(t, bad, build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/spoolbad:1"}}))
		fi, err := os.Stat(bad)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(bad, fi.Size()/2); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(imagesDir, 0o755); err != nil {
			t.Fatal(err)
		}

		res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--spool", spoolDir)
		if res.Code != 1 {
			t.Fatalf("sync with a good and a truncated spool file exited %d, want 1\n%s\n%s", res.Code, res.Stdout, res.Stderr)
		}
		if !strings.Contains(res.Stderr, bad) {
			t.Errorf("the error does not name %s:\n%s", bad, res.Stderr)
		}
		if !strings.Contains(res.Stdout, "spool: "+good+" imported, kept and removed") {
			t.Errorf("sync does not report the spooled file:\n%s", res.Stdout)
		}
		d.requirePinned(t, "e2e.local/keep/spool:1")
		if _, err := os.Stat(good); !os.IsNotExist(err) {
			t.Errorf("%s is still in the spool dir (%v)", good, err)
		}
		if _, err := os.Stat(bad); err != nil {
			t.Errorf("the truncated spool file is gone: %v", err)
		}
		if _, ok := d.keepLeaseOf(t, good); !ok {
			t.Error("no kept lease for the spooled file")
		}

		// The file gone, later syncs keep it, with or without the spool dir.
		c := d.syncOK(t, dataDir, imagesDir)
		if c["unpinned"] != 0 || c["released"] != 0 {
			t.Errorf("sync after the spool file went: %v", c)
		}
		d.requirePinned(t, "e2e.local/keep/spool:1")

		// HOLDFAST_SPOOL works as --spool; the truncated file is still reported.
		cmd := exec.Command(holdfastBin, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir)
		cmd.Env = append(os.Environ(), "HOLDFAST_SPOOL="+filepath.Join(dir, "other")+":"+spoolDir)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), bad) {
			t.Errorf("sync with HOLDFAST_SPOOL: %v\n%s", err, out)
		}
	})
}

// TestSpoolAgent: holdfast run watches its spool dirs: a file still being
// written is never touched; one renamed in complete is imported at once and
// removed.
func TestSpoolAgent(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	dir := filepath.Dir(dataDir)
	spoolDir := filepath.Join(dir, "spool")
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A long settle time: a file written in place (mtime now) counts as
	// still being written for the whole test; one whose mtime is old is complete.
	agent := startAgent(t, d, dataDir, []string{imagesDir}, "--spool", spoolDir, "--settle", "1h")
	eventually(t, "ready", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })
	old := time.Now().Add(-2 * time.Hour)

	// Renamed into place, written long ago: complete at once.
	staged := filepath.Join(dir, "staged.tar")
	writeDockerSave(t, staged, build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/spoolrun:1"}}))
	if err := os.Chtimes(staged, old, old); err != nil {
		t.Fatal(err)
	}
	dropped := filepath.Join(spoolDir, "dropped.tar")
	if err := os.Rename(staged, dropped); err != nil {
		t.Fatal(err)
	}
	d.waitPinned(t, "e2e.local/keep/spoolrun:1")
	eventually(t, "the spool file removed", func() bool { _, err := os.Stat(dropped); return os.IsNotExist(err) })
	if _, ok := d.keepLeaseOf(t, dropped); !ok {
		t.Error("no kept lease for the spool file")
	}

	// Half written in place: a pass sees it pending and leaves it alone.
	whole := filepath.Join(dir, "whole.tar")
	writeDockerSave(t, whole, build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/spoolslow:1"}}))
	data, err := os.ReadFile(whole)
	if err != nil {
		t.Fatal(err)
	}
	slow := filepath.Join(spoolDir, "slow.tar")
	if err := os.WriteFile(slow, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a pass to see the half-written file pending", func() bool {
		return agent.logged("pass:", map[string]string{"pending": "1"}) > 0
	})
	if _, err := os.Stat(slow); err != nil {
		t.Fatalf("the half-written spool file was touched: %v", err)
	}
	if _, ok := d.keepLeaseOf(t, slow); ok {
		t.Error("the half-written spool file was leased")
	}
	// Finished (its mtime set to when the writer ended, long ago): imported, removed.
	f, err := os.OpenFile(slow, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data[len(data)/2:]); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(slow, old, old); err != nil {
		t.Fatal(err)
	}
	d.waitPinned(t, "e2e.local/keep/spoolslow:1")
	eventually(t, "the finished spool file removed", func() bool { _, err := os.Stat(slow); return os.IsNotExist(err) })
	for _, line := range strings.Split(agent.dump(), "\n") {
		if strings.Contains(line, slow) && strings.Contains(line, `"level":"ERROR"`) {
			t.Errorf("the half-written spool file was read: %s", line)
		}
	}
}

// TestImagesDirFileAlsoKept: a file in an images dir that was also imported
// as kept is still an images-dir source of its own: plan lists its import,
// and sync imports it under its own lease.
func TestImagesDirFileAlsoKept(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	path := filepath.Join(imagesDir, "both.tar")
	writeDockerSave(t, path, build(t, fixture.ImageSpec{Names: []string{"e2e.local/keep/bothmodels:1"}}))
	d.keepImportOK(t, dataDir, path)
	res := holdfast(t, "plan", "-o", "json", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir)
	if res.Code != 0 {
		t.Fatalf("plan exited %d: %s", res.Code, res.Stderr)
	}
	var plan struct {
		Actions []struct{ Action, Source, Reason string }
	}
	if err := json.Unmarshal([]byte(res.Stdout), &plan); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, res.Stdout)
	}
	planned := false
	for _, a := range plan.Actions {
		planned = planned || (a.Action == "import" && a.Source == path)
	}
	if !planned {
		t.Errorf("plan lists no import of %s, which has no images-dir lease yet: %s", path, res.Stdout)
	}
	if c := d.syncOK(t, dataDir, imagesDir); c["imported"] != 1 {
		t.Errorf("sync of the images dir: %v, want 1 imported", c)
	}
	if _, ok := d.leaseOf(t, path); !ok {
		t.Error("no lease for the images-dir source")
	}
}

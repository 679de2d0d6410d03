package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"

	"github.com/holdfast-project/holdfast/internal/embedded"
	"github.com/holdfast-project/holdfast/internal/fixture"
)

// seedContainerd is a containerd the test can stop and start again on the
// same root, as a node's containerd restarts.
type seedContainerd struct {
	name  string
	start func() *daemon
	stop  func()
	// dataDir, when set, is the data dir whose embedded containerd
	// `holdfast run` starts itself (no --address); start runs that same
	// containerd alone, while no agent runs.
	dataDir string
}

// seedEmbedded is holdfast's embedded containerd (2.x) on a root of its own,
// apart from any holdfast data dir.
func seedEmbedded(t *testing.T) *seedContainerd {
	t.Helper()
	requireRoot(t)
	c := &seedContainerd{name: "embedded"}
	seedEmbeddedOn(t, c, tempDir(t))
	return c
}

// seedAgentOwned is the embedded containerd `holdfast run` starts in its
// own data dir when given no --address, as on a node without containerd.
func seedAgentOwned(t *testing.T) *seedContainerd {
	t.Helper()
	requireRoot(t)
	c := &seedContainerd{name: "agent-owned", dataDir: filepath.Join(tempDir(t), "data")}
	seedEmbeddedOn(t, c, c.dataDir)
	return c
}

// seedEmbeddedOn makes c start and stop an embedded containerd on root, and
// stops it when the test ends.
func seedEmbeddedOn(t *testing.T, c *seedContainerd, root string) {
	var p *embedded.Process
	c.start = func() *daemon {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var err error
		if p, err = embedded.Start(ctx, root, embedded.Options{Binary: holdfastBin}); err != nil {
			t.Fatalf("starting embedded containerd: %v", err)
		}
		return connect(t, c.name, p.Address(), false)
	}
	c.stop = func() {
		if p == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("stopping embedded containerd: %v", err)
		}
		p = nil
	}
	t.Cleanup(c.stop)
}

// seedRun starts `holdfast run` with its spool dir: against c's containerd,
// or, when c is agent-owned, with the agent starting it in the data dir.
func (c *seedContainerd) seedRun(t *testing.T, d *daemon, dataDir, imagesDir string, args ...string) (*daemon, *agentProc) {
	t.Helper()
	if c.dataDir == "" {
		a := startAgent(t, d, dataDir, []string{imagesDir}, args...)
		eventually(t, "ready", func() bool { code, _ := a.get(t, "/readyz"); return code == 200 })
		return d, a
	}
	a := startAgent(t, &daemon{}, dataDir, []string{imagesDir}, args...) // --address "": the embedded one
	eventually(t, "ready", func() bool { code, _ := a.get(t, "/readyz"); return code == 200 })
	return connect(t, c.name, embedded.Paths(dataDir).Address, false), a
}

// seedLoseDataDir deletes holdfast's data dir; when containerd's store lives
// in it (agent-owned), everything of it but that store.
func (c *seedContainerd) seedLoseDataDir(t *testing.T, dataDir string) {
	t.Helper()
	if c.dataDir == "" {
		if err := os.RemoveAll(dataDir); err != nil {
			t.Fatal(err)
		}
		return
	}
	entries, err := os.ReadDir(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	keep := filepath.Base(embedded.Paths(dataDir).Dir)
	for _, e := range entries {
		if e.Name() == keep {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dataDir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// seedDebian is Debian's containerd 1.6 with its CRI, on a root of its own.
func seedDebian(t *testing.T) *seedContainerd {
	p := newDebian(t, true)
	return &seedContainerd{name: p.name, start: p.start, stop: p.stop}
}

// seedForEach runs fn against a restartable embedded containerd, the one
// `holdfast run` starts in its data dir, and Debian's 1.6, each in its own
// subtest.
func seedForEach(t *testing.T, fn func(t *testing.T, c *seedContainerd)) {
	t.Helper()
	for _, s := range []struct {
		name  string
		start func(*testing.T) *seedContainerd
	}{{"embedded", seedEmbedded}, {"agent-owned", seedAgentOwned}, {"debian-1.6", seedDebian}} {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			fn(t, s.start(t))
		})
	}
}

// seedPinned lists the names holdfast has pinned (its own label).
func (d *daemon) seedPinned(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, n := range d.recordNames(t) {
		if _, hf := d.pinnedBy(t, n); hf {
			out[n] = true
		}
	}
	return out
}

// seedCRIPinned waits until the CRI reports each name pinned (containerd
// 1.6 never reports pins: nothing to check there).
func (d *daemon) seedCRIPinned(t *testing.T, names ...string) {
	t.Helper()
	if d.Old {
		return
	}
	for _, n := range names {
		eventually(t, "the CRI to report "+n+" pinned", func() bool {
			found, pinned := d.criImage(t, n)
			return found && pinned
		})
	}
}

// seedRequireIntact fails unless the store holds every host-platform blob
// of name's record and the lease holds each of them.
func (d *daemon) seedRequireIntact(t *testing.T, name, leaseID string) {
	t.Helper()
	rec, ok := d.record(t, name)
	if !ok {
		t.Errorf("no record %s", name)
		return
	}
	var held map[string]bool
	for _, l := range d.holdfastLeases(t) {
		if l.ID == leaseID {
			held = map[string]bool{}
			for dg := range d.leaseContent(t, l) {
				held[dg.String()] = true
			}
		}
	}
	if held == nil {
		t.Errorf("no lease %s", leaseID)
		return
	}
	for _, b := range d.hostBlobs(t, rec.Target) {
		if !d.hasBlob(t, b.Digest) {
			t.Errorf("%s: the store lacks %s", name, b.Digest)
		}
		if !held[b.Digest.String()] {
			t.Errorf("%s: lease %s does not hold %s", name, leaseID, b.Digest)
		}
	}
}

// TestSpoolSeedSurvivesRestartsAndLostDataDir is the seed workflow of a new
// node: `holdfast run --spool DIR`, archives copied into the spool dir (one
// under a .tmp name then renamed, one by a plain copy still being written
// for a moment); each is imported as a kept source, pinned, leased, and
// removed from the spool dir. Then the agent stops, containerd restarts on
// the same root, holdfast's data dir is lost, and the agent starts again:
// every image is still pinned (a deleted one, after containerd's GC really
// ran, is restored), and one removed by crictl rmi is healed at once.
func TestSpoolSeedSurvivesRestartsAndLostDataDir(t *testing.T) {
	seedForEach(t, func(t *testing.T, c *seedContainerd) {
		var d *daemon
		if c.dataDir == "" {
			d = c.start()
		}
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		dataDir := filepath.Join(dir, "data")
		if c.dataDir != "" {
			dataDir = c.dataDir
		}
		spoolDir := filepath.Join(dir, "spool")
		if err := os.MkdirAll(imagesDir, 0o755); err != nil {
			t.Fatal(err)
		}
		// The default settle time, as a new user runs it; the spool dir is
		// not there yet: holdfast makes it.
		runArgs := []string{"--spool", spoolDir, "--settle", "2s"}
		d, agent := c.seedRun(t, d, dataDir, imagesDir, runArgs...)
		if fi, err := os.Stat(spoolDir); err != nil || !fi.IsDir() {
			t.Fatalf("holdfast run did not make the spool dir: %v", err)
		}

		shared := sharedLayer(t, 41)
		a := build(t, fixture.ImageSpec{Names: []string{"e2e.local/seed/a:1", "e2e.local/seed/a:stable"}, SharedLayers: []*fixture.Layer{shared}})
		b := build(t, fixture.ImageSpec{Names: []string{"e2e.local/seed/b:1"}, SharedLayers: []*fixture.Layer{shared},
			Layers: fixture.UniformLayers(2, 512<<10, false, 42)})
		stalled := build(t, fixture.ImageSpec{Names: []string{"e2e.local/seed/c:1"}})
		names := []string{"e2e.local/seed/a:1", "e2e.local/seed/a:stable", "e2e.local/seed/b:1", "e2e.local/seed/c:1"}

		// a: copied under a .tmp name, which no pass reads, then renamed.
		pathA := filepath.Join(spoolDir, "a.tar")
		tmpA := pathA + ".tmp"
		writeDockerSave(t, tmpA, a)
		gapScanned(t, agent, imagesDir) // the pass scans the spool dir too
		if _, err := os.Stat(tmpA); err != nil {
			t.Fatalf("the .tmp copy in the spool dir was touched: %v", err)
		}
		if _, ok := d.keepLeaseOf(t, tmpA); ok {
			t.Error("the .tmp copy in the spool dir was imported")
		}
		if err := os.Rename(tmpA, pathA); err != nil {
			t.Fatal(err)
		}

		// b: a plain copy into the spool dir, half written when a pass scans.
		staged := filepath.Join(dir, "b.tar")
		writeDockerSave(t, staged, b)
		data, err := os.ReadFile(staged)
		if err != nil {
			t.Fatal(err)
		}
		pathB := filepath.Join(spoolDir, "b.tar")
		f, err := os.Create(pathB)
		if err != nil {
			t.Fatal(err)
		}
		half := len(data) / 2
		if _, err := f.Write(data[:half]); err != nil {
			t.Fatal(err)
		}
		gapScanned(t, agent, imagesDir)
		// Whether that pass found it still being written or tried it and
		// failed, a half-written file is neither removed nor kept.
		if fi, err := os.Stat(pathB); err != nil || fi.Size() != int64(half) {
			t.Fatalf("the half-written spool file was touched: %v", err)
		}
		if _, ok := d.keepLeaseOf(t, pathB); ok {
			t.Error("the half-written spool file was kept")
		}
		t.Logf("passes that left a source pending: %d; import errors naming the half-written file: %d",
			agent.logged("pass:", map[string]string{"pending": "1"})+agent.logged("pass:", map[string]string{"pending": "2"}),
			strings.Count(agent.dump(), pathB+" (left in the spool dir)"))
		if _, err := f.Write(data[half:]); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}

		// c: a copy that stalled halfway for longer than the settle time
		// (its mtime old): a pass imports it, fails, and leaves it in place;
		// once the copy ends (the file changed), it is imported at once.
		staged = filepath.Join(dir, "c.tar")
		writeDockerSave(t, staged, stalled)
		if data, err = os.ReadFile(staged); err != nil {
			t.Fatal(err)
		}
		pathC := filepath.Join(spoolDir, "c.tar")
		half = len(data) / 2
		if err := os.WriteFile(pathC, data[:half], 0o644); err != nil {
			t.Fatal(err)
		}
		past := time.Now().Add(-time.Hour)
		if err := os.Chtimes(pathC, past, past); err != nil {
			t.Fatal(err)
		}
		eventually(t, "an error naming the stalled spool file", func() bool {
			return strings.Contains(agent.dump(), pathC+" (left in the spool dir)")
		})
		if fi, err := os.Stat(pathC); err != nil || fi.Size() != int64(half) {
			t.Fatalf("the spool file that failed to import was touched: %v", err)
		}
		if _, ok := d.keepLeaseOf(t, pathC); ok {
			t.Error("the spool file that failed to import was kept")
		}
		f, err = os.OpenFile(pathC, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(data[half:]); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}

		d.waitPinned(t, names...)
		for _, p := range []string{pathA, pathB, pathC} {
			eventually(t, p+" removed from the spool dir", func() bool { _, err := os.Stat(p); return os.IsNotExist(err) })
		}
		if n := agent.logged("imported from spool", map[string]string{"path": pathB}); n != 1 {
			t.Errorf("b.tar imported %d times, want once", n)
		}
		keptLease := map[string]string{}
		for _, p := range []string{pathA, pathB} {
			l, ok := d.keepLeaseOf(t, p)
			if !ok {
				t.Fatalf("no kept lease for %s among %v", p, d.holdfastLeases(t))
			}
			keptLease[p] = l.ID
		}
		if _, ok := d.keepLeaseOf(t, tmpA); ok {
			t.Error("a kept lease names the .tmp copy")
		}
		d.seedCRIPinned(t, names...)
		targets := map[string]images.Image{}
		for _, n := range names {
			targets[n], _ = d.record(t, n)
		}

		// The agent stops, containerd restarts on the same root, the data
		// dir is lost.
		agent.stop(t)
		d.Client.Close()
		c.stop()
		c.seedLoseDataDir(t, dataDir)
		d = c.start()
		d.requirePinned(t, names...)

		// While no agent runs, b:1 is deleted with a synchronous delete: GC
		// runs (an unleased control image deleted the same way loses its
		// blobs); only the kept lease holds b's content.
		control := build(t, fixture.ImageSpec{Names: []string{"e2e.local/seed/control:1"}})
		keepCtrImport(t, d, control)
		controlLayer := control.Manifests[0].Layers[0].Digest()
		d.deleteImageSync(t, control.Target.Digest)
		d.deleteImageSync(t, targets["e2e.local/seed/b:1"].Target.Digest)
		eventually(t, "GC to remove the control image's layer", func() bool { return !d.hasBlob(t, controlLayer) })
		if _, ok := d.record(t, "e2e.local/seed/b:1"); ok {
			t.Fatal("b:1 still has a record after its delete")
		}

		if c.dataDir != "" {
			// The agent starts its containerd itself.
			d.Client.Close()
			c.stop()
		}
		d, agent = c.seedRun(t, d, dataDir, imagesDir, runArgs...)
		d.waitPinned(t, names...)
		d.seedCRIPinned(t, names...)
		for _, n := range names {
			if rec, _ := d.record(t, n); rec.Target.Digest != targets[n].Target.Digest {
				t.Errorf("%s points at %s after the restarts, was %s", n, rec.Target.Digest, targets[n].Target.Digest)
			}
		}
		for p, id := range keptLease {
			if l, ok := d.keepLeaseOf(t, p); !ok || l.ID != id {
				t.Errorf("kept lease of %s after the restarts: %q (found %v), was %q", p, l.ID, ok, id)
			}
		}
		d.seedRequireIntact(t, "e2e.local/seed/b:1", keptLease[pathB])

		// crictl rmi removes every name of a: the agent heals them.
		heals := func() float64 { return agent.metric(t, "holdfast_heals_total", nil) }
		before := heals()
		d.crictl(t, "rmi", "e2e.local/seed/a:1")
		d.waitPinned(t, names...)
		eventually(t, "holdfast_heals_total to move after crictl rmi", func() bool { return heals() > before })
		d.seedCRIPinned(t, names...)
		d.seedRequireIntact(t, "e2e.local/seed/a:1", keptLease[pathA])

		// The end of a seed: release what a.tar brought, by the path it had
		// in the spool dir, beside the agent. Its names are unpinned, and
		// stay so after the pass that the unpin brings on; b and c, which
		// share a layer with it, keep theirs and their content.
		passes := func() int { return agent.logged("pass:", nil) }
		beforePasses := passes()
		if res := holdfast(t, "release", "--data-dir", dataDir, pathA); res.Code != 0 {
			t.Fatalf("release beside the agent exited %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
		}
		eventually(t, "a pass after the release", func() bool { return passes() > beforePasses })
		// And a pass surely begun after it: one a new archive brings on.
		writeDockerSave(t, filepath.Join(imagesDir, "later.tar"), build(t, fixture.ImageSpec{Names: []string{"e2e.local/seed/later:1"}}))
		d.waitPinned(t, "e2e.local/seed/later:1")
		d.keepRequireUnpinned(t, "e2e.local/seed/a:1", "e2e.local/seed/a:stable")
		if _, ok := d.keepLeaseOf(t, pathA); ok {
			t.Error("a.tar's kept lease is still there after release")
		}
		d.requirePinned(t, "e2e.local/seed/b:1", "e2e.local/seed/c:1")
		d.seedRequireIntact(t, "e2e.local/seed/b:1", keptLease[pathB])
	})
}

// TestReleaseAfterImportedFileDeleted: `holdfast import x.tar && rm x.tar`,
// then `holdfast sync` unpins nothing; `holdfast release x.tar` unpins
// exactly the images only that source wanted, and leaves pinned (and
// healable) one a pin list in the images dir wants and one another archive
// in the images dir holds.
func TestReleaseAfterImportedFileDeleted(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		if err := os.MkdirAll(imagesDir, 0o755); err != nil {
			t.Fatal(err)
		}
		only := build(t, fixture.ImageSpec{Names: []string{"e2e.local/seed/only:1"}})
		listed := build(t, fixture.ImageSpec{Names: []string{"e2e.local/seed/listed:1"}})
		shared := build(t, fixture.ImageSpec{Names: []string{"e2e.local/seed/shared:1"}})
		other := build(t, fixture.ImageSpec{Names: []string{"e2e.local/seed/other:1"}})
		if err := os.WriteFile(filepath.Join(imagesDir, "keep.pins"), []byte("e2e.local/seed/listed:1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		writeDockerSave(t, filepath.Join(imagesDir, "other.tar"), shared, other)
		x := filepath.Join(dir, "x.tar")
		writeDockerSave(t, x, only, listed, shared)

		d.keepImportOK(t, dataDir, x)
		if err := os.Remove(x); err != nil {
			t.Fatal(err)
		}
		c := d.syncOK(t, dataDir, imagesDir)
		if c["unpinned"] != 0 || c["released"] != 0 {
			t.Errorf("sync after the imported file was deleted: %v, want nothing unpinned or released", c)
		}
		all := []string{"e2e.local/seed/only:1", "e2e.local/seed/listed:1", "e2e.local/seed/shared:1", "e2e.local/seed/other:1"}
		d.requirePinned(t, all...)
		before := d.seedPinned(t)

		res := holdfast(t, "release", "--address", d.Address, "--data-dir", dataDir, x)
		if res.Code != 0 {
			t.Fatalf("release exited %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
		}
		if !strings.Contains(res.Stdout, "released "+x) || !strings.Contains(res.Stdout, "unpinned e2e.local/seed/only:1") {
			t.Errorf("release output:\n%s", res.Stdout)
		}
		if _, ok := d.keepLeaseOf(t, x); ok {
			t.Error("the released source's lease is still there")
		}
		// Exactly the names no other source wants lose their pins: only's,
		// and listed's digest name, which the pin list's "listed:1" does
		// not match (the image stays pinned by its tag).
		after := d.seedPinned(t)
		for n := range before {
			if after[n] {
				continue
			}
			if n != "e2e.local/seed/only:1" && !strings.HasPrefix(n, "e2e.local/seed/only@") && !strings.HasPrefix(n, "e2e.local/seed/listed@") {
				t.Errorf("release of x.tar unpinned %s, which another source wants", n)
			}
		}
		for n := range after {
			if !before[n] {
				t.Errorf("release pinned %s", n)
			}
		}
		d.keepRequireUnpinned(t, "e2e.local/seed/only:1")
		d.requirePinned(t, "e2e.local/seed/listed:1", "e2e.local/seed/shared:1", "e2e.local/seed/other:1")
		if !d.Old {
			eventually(t, "the CRI to report only:1 unpinned", func() bool {
				found, pinned := d.criImage(t, "e2e.local/seed/only:1")
				return found && !pinned
			})
			d.seedCRIPinned(t, "e2e.local/seed/listed:1", "e2e.local/seed/shared:1")
		}

		// A sync changes nothing of it, and what others want is still
		// theirs: deleted, it is healed from their leases.
		if c := d.syncOK(t, dataDir, imagesDir); c["healed"] != 0 || c["unpinned"] != 0 {
			t.Errorf("sync after release: %v, want nothing healed or unpinned", c)
		}
		d.keepRequireUnpinned(t, "e2e.local/seed/only:1")
		d.crictl(t, "rmi", "e2e.local/seed/listed:1", "e2e.local/seed/shared:1")
		if c := d.syncOK(t, dataDir, imagesDir); c["healed"] < 2 {
			t.Errorf("sync after crictl rmi of listed:1 and shared:1: %v, want both healed", c)
		}
		d.requirePinned(t, "e2e.local/seed/listed:1", "e2e.local/seed/shared:1", "e2e.local/seed/other:1")
		d.keepRequireUnpinned(t, "e2e.local/seed/only:1")
	})
}

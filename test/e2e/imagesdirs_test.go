package e2e

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// fsHoldfast runs the holdfast binary like holdfast does, but reports a
// process that never ends as a failure of its own (a hung pass) instead of
// waiting out the suite's timeout.
func fsHoldfast(t *testing.T, args ...string) result {
	t.Helper()
	const limit = 2 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	res := runHoldfast(t, exec.CommandContext(ctx, holdfastBin, args...))
	if ctx.Err() != nil {
		t.Fatalf("holdfast %v had not finished after %s (hung); stderr:\n%s", args, limit, tail(res.Stderr, 20))
	}
	return res
}

// fsRename writes an archive into dir under a hidden name and renames it into
// place, as an operator copying an archive in should.
func fsRename(t *testing.T, dir, name string, img *fixture.Image) string {
	t.Helper()
	staging := filepath.Join(dir, "."+name+".tmp")
	writeDockerSave(t, staging, img)
	path := filepath.Join(dir, name)
	if err := os.Rename(staging, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// fsMountTmpfs mounts a fresh tmpfs on dir until the test ends.
func fsMountTmpfs(t *testing.T, dir string) {
	t.Helper()
	// mode=0755 as a volume mounted at an images dir is; tmpfs's own default,
	// 1777, lets anyone drop an archive in, which holdfast refuses.
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64m,mode=0755"); err != nil {
		t.Fatalf("mounting a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
}

// TestSymlinkedImagesDir: an images dir that is a symlink to a data disk is
// read through the link: sync imports its archives, named under the path the
// operator gave; the agent watches the link's target, reports it, and unpins
// an archive deleted from it.
func TestSymlinkedImagesDir(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	disk := filepath.Join(filepath.Dir(imagesDir), "disk", "images")
	a := build(t, fixture.ImageSpec{Names: []string{"e2e.local/fslink/a:1"}})
	writeDockerSave(t, filepath.Join(disk, "a.tar"), a)
	if err := os.Symlink(disk, imagesDir); err != nil {
		t.Fatal(err)
	}

	c := d.syncOK(t, dataDir, imagesDir)
	if c["imported"] != 1 {
		t.Errorf("sync through a symlinked images dir: %v", c)
	}
	d.requirePinned(t, "e2e.local/fslink/a:1")
	if _, ok := d.leaseOf(t, filepath.Join(imagesDir, "a.tar")); !ok {
		t.Errorf("no lease for %s: sources are named under the path given", filepath.Join(imagesDir, "a.tar"))
	}

	agent := startAgent(t, d, dataDir, []string{imagesDir}, "--resync", "1h")
	eventually(t, "ready", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })
	eventually(t, "the agent to report the link's target", func() bool {
		return agent.logged("images dir is a symlink", map[string]string{"path": imagesDir, "target": disk}) > 0
	})
	b := build(t, fixture.ImageSpec{Names: []string{"e2e.local/fslink/b:1"}})
	fsRename(t, disk, "b.tar", b)
	d.waitPinned(t, "e2e.local/fslink/b:1")
	if _, ok := d.leaseOf(t, filepath.Join(imagesDir, "b.tar")); !ok {
		t.Errorf("no lease for %s", filepath.Join(imagesDir, "b.tar"))
	}

	// A pass judges what is under the symlinked dir: a deleted archive goes.
	if err := os.Remove(filepath.Join(disk, "a.tar")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a unpinned and released", func() bool {
		cri, hf := d.pinnedBy(t, "e2e.local/fslink/a:1")
		_, leased := d.leaseOf(t, filepath.Join(imagesDir, "a.tar"))
		return !cri && !hf && !leased
	})
	d.requirePinned(t, "e2e.local/fslink/b:1")
}

// TestFIFOInImagesDir: a named pipe, and symlinks to one (as an archive and as
// a pin list), are skipped without being opened: sync finishes, says why at
// debug level and imports the other archives; the agent becomes ready.
func TestFIFOInImagesDir(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	a := build(t, fixture.ImageSpec{Names: []string{"e2e.local/fsfifo/a:1"}})
	writeDockerSave(t, filepath.Join(imagesDir, "a.tar"), a)
	outside := filepath.Join(filepath.Dir(imagesDir), "pipe")
	for _, p := range []string{filepath.Join(imagesDir, "pipe.tar"), outside} {
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"link.tar", "link.pins"} {
		if err := os.Symlink(outside, filepath.Join(imagesDir, name)); err != nil {
			t.Fatal(err)
		}
	}

	res := fsHoldfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--log-level", "debug")
	if res.Code != 0 {
		t.Fatalf("sync exited %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
	}
	d.requirePinned(t, "e2e.local/fsfifo/a:1")
	for _, name := range []string{"pipe.tar", "link.tar", "link.pins"} {
		found := false
		for _, line := range strings.Split(res.Stderr, "\n") {
			if strings.Contains(line, `"msg":"skipped"`) && strings.Contains(line, filepath.Join(imagesDir, name)) &&
				strings.Contains(line, "not a regular file") {
				found = true
			}
		}
		if !found {
			t.Errorf("sync did not say at debug level why it skipped %s:\n%s", name, res.Stderr)
		}
	}

	agent := startAgent(t, d, dataDir, []string{imagesDir})
	eventually(t, "the agent to become ready", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })
	b := build(t, fixture.ImageSpec{Names: []string{"e2e.local/fsfifo/b:1"}})
	fsRename(t, imagesDir, "b.tar", b)
	d.waitPinned(t, "e2e.local/fsfifo/b:1")
	d.requirePinned(t, "e2e.local/fsfifo/a:1")
}

// TestImagesDirReplaced: under `holdfast run` with a resync far away, an
// images dir deleted and re-created, one mounted over, and one that did not
// exist at start are all watched: an archive dropped into each is imported
// without waiting for a resync.
func TestImagesDirReplaced(t *testing.T) {
	d, base, dataDir := embeddedScene(t)
	recreated, mounted, later := base+"-recreated", base+"-mounted", base+"-later"
	old := build(t, fixture.ImageSpec{Names: []string{"e2e.local/fsdir/old:1"}})
	writeDockerSave(t, filepath.Join(recreated, "old.tar"), old)
	if err := os.MkdirAll(mounted, 0o755); err != nil {
		t.Fatal(err)
	}
	agent := startAgent(t, d, dataDir, []string{recreated, mounted, later}, "--resync", "1h")
	eventually(t, "ready", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })
	d.waitPinned(t, "e2e.local/fsdir/old:1")

	// Deleted and re-created: a new archive is imported, the deleted one goes.
	// The dir is re-created only after a pass has seen it gone, so that no
	// pass triggered by the deletion finds the new archive.
	passes := agent.logged("pass:", nil)
	if err := os.RemoveAll(recreated); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a pass after the deletion", func() bool { return agent.logged("pass:", nil) > passes })
	if err := os.Mkdir(recreated, 0o755); err != nil {
		t.Fatal(err)
	}
	fsRename(t, recreated, "new.tar", build(t, fixture.ImageSpec{Names: []string{"e2e.local/fsdir/new:1"}}))
	d.waitPinned(t, "e2e.local/fsdir/new:1")
	eventually(t, "the deleted archive's lease released", func() bool {
		_, ok := d.leaseOf(t, filepath.Join(recreated, "old.tar"))
		return !ok
	})

	// Mounted over.
	fsMountTmpfs(t, mounted)
	fsRename(t, mounted, "m.tar", build(t, fixture.ImageSpec{Names: []string{"e2e.local/fsdir/mounted:1"}}))
	d.waitPinned(t, "e2e.local/fsdir/mounted:1")

	// Created after the agent started.
	if err := os.Mkdir(later, 0o755); err != nil {
		t.Fatal(err)
	}
	fsRename(t, later, "l.tar", build(t, fixture.ImageSpec{Names: []string{"e2e.local/fsdir/later:1"}}))
	d.waitPinned(t, "e2e.local/fsdir/later:1")
}

// TestDataDirDeletedUnderAgent: the data dir deleted while `holdfast run` owns
// it is re-created with its lock and the reporter's token (the same, which the
// agent still takes): a sync on it refuses, naming the agent, and `holdfast
// pin` on it takes effect in the agent.
func TestDataDirDeletedUnderAgent(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	writeDockerSave(t, filepath.Join(imagesDir, "a.tar"), build(t, fixture.ImageSpec{Names: []string{"e2e.local/fsdata/a:1"}}))
	// An image in the store that no source wants: only a pin pattern will pin it.
	loose := build(t, fixture.ImageSpec{Names: []string{"e2e.local/fsdata/loose:1"}})
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(fixture.WriteOCI(context.Background(), pw, fixture.OCIOptions{Names: fixture.NameContainerd}, loose))
	}()
	if _, err := d.Client.Import(d.ctx(), pr); err != nil {
		t.Fatalf("importing an unpinned image: %v", err)
	}
	agent := startAgent(t, d, dataDir, []string{imagesDir})
	d.waitPinned(t, "e2e.local/fsdata/a:1")

	token, err := os.ReadFile(agent.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	// The agent may write into the dir while it is being removed (a file made after RemoveAll read its
	// directory fails it with "directory not empty"): removed again until one removal gets all of it.
	eventually(t, "the data dir removed under the agent", func() bool { return os.RemoveAll(dataDir) == nil })
	eventually(t, "the data dir, its lock and the reporter's token to exist again", func() bool {
		_, lerr := os.Stat(filepath.Join(dataDir, "lock"))
		_, oerr := os.Stat(filepath.Join(dataDir, "owner.json"))
		again, terr := os.ReadFile(agent.tokenFile)
		return lerr == nil && oerr == nil && terr == nil && bytes.Equal(again, token)
	})
	agent.put(t, "/required", `{"images":[]}`)
	if agent.logged("the data dir was deleted", nil) == 0 {
		t.Errorf("the agent did not say the data dir was deleted:\n%s", tail(agent.dump(), 20))
	}

	res := fsHoldfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir)
	if res.Code == 0 || !strings.Contains(res.Stderr, "in use by holdfast run") {
		t.Errorf("sync beside the agent after the data dir was re-created: exit %d, stderr:\n%s", res.Code, res.Stderr)
	}

	res = fsHoldfast(t, "pin", "--data-dir", dataDir, "e2e.local/fsdata/loose")
	if res.Code != 0 {
		t.Fatalf("pin: %d %s %s", res.Code, res.Stdout, res.Stderr)
	}
	d.waitPinned(t, "e2e.local/fsdata/loose:1")
	d.requirePinned(t, "e2e.local/fsdata/a:1")
}

// TestUnmountedImagesVolume: an images dir that is a mount point whose volume
// goes away is unknown, not empty: sync keeps every pin and lease and exits 1
// saying why; once the operator confirms the dir is empty on purpose (the
// marker file the README documents), the next sync unpins and releases.
func TestUnmountedImagesVolume(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		dataDir := filepath.Join(dir, "data")
		if err := os.MkdirAll(imagesDir, 0o755); err != nil {
			t.Fatal(err)
		}
		fsMountTmpfs(t, imagesDir)
		archive := filepath.Join(imagesDir, "a.tar")
		writeDockerSave(t, archive, build(t, fixture.ImageSpec{Names: []string{"e2e.local/fsvol/a:1"}}))
		d.syncOK(t, dataDir, imagesDir)
		d.requirePinned(t, "e2e.local/fsvol/a:1")

		if err := syscall.Unmount(imagesDir, 0); err != nil {
			t.Fatal(err)
		}
		res := d.sync(t, dataDir, imagesDir)
		if res.Code != 1 {
			t.Errorf("sync after the volume went away exited %d, want 1\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
		}
		marker := filepath.Join(imagesDir, ".holdfast-images")
		if !strings.Contains(res.Stderr, imagesDir) || !strings.Contains(res.Stderr, "touch "+marker) {
			t.Errorf("sync did not say why it kept %s, nor how to confirm:\n%s", imagesDir, res.Stderr)
		}
		d.requirePinned(t, "e2e.local/fsvol/a:1")
		if _, ok := d.leaseOf(t, archive); !ok {
			t.Error("the lease of an archive on the unmounted volume was released")
		}

		// The operator confirms the dir is empty on purpose.
		if err := os.WriteFile(marker, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		c := d.syncOK(t, dataDir, imagesDir)
		if c["unpinned"] < 1 || c["released"] != 1 {
			t.Errorf("sync after confirming: %v", c)
		}
		if cri, hf := d.pinnedBy(t, "e2e.local/fsvol/a:1"); cri || hf {
			t.Errorf("still pinned after confirming: CRI %v holdfast %v", cri, hf)
		}
		if _, ok := d.leaseOf(t, archive); ok {
			t.Error("still leased after confirming")
		}
	})
}

package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// TestPassFutureMtimeImported: under `holdfast run`, an archive whose mtime is
// a year ahead of the clock (copied with cp -p from a machine whose clock is
// ahead) is imported and pinned once it has stayed unchanged for the settle
// time, and the agent becomes ready.
func TestPassFutureMtimeImported(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	img := build(t, fixture.ImageSpec{Names: []string{"e2e.local/pass/future:1"}})
	path := filepath.Join(imagesDir, "future.tar")
	writeDockerSave(t, path, img)
	future := time.Now().AddDate(1, 0, 0)
	if err := os.Chtimes(path, future, future); err != nil {
		t.Fatal(err)
	}
	agent := startAgent(t, d, dataDir, []string{imagesDir})
	eventually(t, "/readyz to turn 200 with an archive whose mtime is a year ahead", func() bool {
		code, _ := agent.get(t, "/readyz")
		return code == 200
	})
	d.waitPinned(t, "e2e.local/pass/future:1")
	if _, ok := d.leaseOf(t, path); !ok {
		t.Error("future.tar has no lease")
	}
	if n := agent.logged("imported", map[string]string{"path": path}); n != 1 {
		t.Errorf("future.tar imported %d times, want once", n)
	}
}

// TestPassPullListRestoresDrift: a pull list whose names were re-pointed while
// no agent watched (ctr tag --force; an Update of the target) restores them at
// the next sync and reports drift; what it leased stays as it was. One name
// the list pulled from a registry, one it found in the store, brought by an
// archive that is older than the list.
func TestPassPullListRestoresDrift(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	_, host := startRegistry(t)
	pulled := build(t, fixture.ImageSpec{Names: []string{"e2e.local/pass/pulled:1"}})
	app := build(t, fixture.ImageSpec{Names: []string{"e2e.local/pass/app:1"}})
	other := build(t, fixture.ImageSpec{Names: []string{"e2e.local/pass/other:1"}})
	pulledRef := host + "/team/pulled:1"
	pulledDigest := push(t, pulledRef, pulled)
	writeDockerSave(t, filepath.Join(imagesDir, "app.tar"), app)
	d.syncOK(t, dataDir, imagesDir)
	appRec, _ := d.record(t, "e2e.local/pass/app:1")

	listPath := filepath.Join(imagesDir, "list.txt")
	if err := os.WriteFile(listPath, []byte(pulledRef+"\ne2e.local/pass/app:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.syncOK(t, dataDir, imagesDir)
	d.requirePinned(t, pulledRef, "e2e.local/pass/app:1")
	lease, ok := d.leaseOf(t, listPath)
	if !ok {
		t.Fatal("the pull list has no lease")
	}
	held := d.leaseContent(t, lease)

	// Another image, brought by no source of holdfast's.
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(fixture.WriteOCI(context.Background(), pw, fixture.OCIOptions{Names: fixture.NameContainerd}, other))
	}()
	if _, err := d.Client.Import(d.ctx(), pr); err != nil {
		t.Fatalf("importing another image: %v", err)
	}
	otherRec, ok := d.record(t, "e2e.local/pass/other:1")
	if !ok {
		t.Fatal("the other image has no record")
	}
	// Both names re-pointed at it, with no agent to heal them.
	for _, n := range []string{pulledRef, "e2e.local/pass/app:1"} {
		rec, _ := d.record(t, n)
		rec.Target = otherRec.Target
		if _, err := d.Client.ImageService().Update(d.ctx(), rec, "target"); err != nil {
			t.Fatal(err)
		}
	}

	res := d.sync(t, dataDir, imagesDir)
	c := summaryCounts(t, res.Stdout)
	if res.Code != 0 || c["drift"] != 2 || c["conflicts"] != 0 || c["released"] != 0 {
		t.Errorf("sync after the re-points: exit %d, %v, want drift 2, no conflict, nothing released\n%s\n%s", res.Code, c, res.Stdout, res.Stderr)
	}
	if rec, _ := d.record(t, pulledRef); rec.Target.Digest.String() != pulledDigest {
		t.Errorf("%s points at %s, want the list's %s", pulledRef, rec.Target.Digest, pulledDigest)
	}
	if rec, _ := d.record(t, "e2e.local/pass/app:1"); rec.Target.Digest != appRec.Target.Digest {
		t.Errorf("app:1 points at %s, want the archive's and the list's %s", rec.Target.Digest, appRec.Target.Digest)
	}
	d.requirePinned(t, pulledRef, "e2e.local/pass/app:1")
	now, ok := d.leaseOf(t, listPath)
	if !ok || now.ID != lease.ID {
		t.Errorf("the pull list's lease changed: %q, was %q", now.ID, lease.ID)
	} else if got := d.leaseContent(t, now); !passSameSet(got, held) {
		t.Errorf("the pull list's lease holds %d blobs, held %d", len(got), len(held))
	}

	// The next sync has nothing to restore.
	if c := d.syncOK(t, dataDir, imagesDir); c["drift"] != 0 || c["released"] != 0 || c["unpinned"] != 0 {
		t.Errorf("sync after the restore: %v", c)
	}
}

func passSameSet(a, b map[digest.Digest]bool) bool {
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

// passNobody is the uid and gid `holdfast sync` runs as in the tests of
// sources it cannot read (as root, a mode of 000 does not stop a read).
const passNobody = 65534

// passSyncAsNobody runs `holdfast sync` against d as uid 65534.
func passSyncAsNobody(t *testing.T, d *daemon, dataDir, imagesDir string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, holdfastBin, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "HOLDFAST_LOG_FORMAT=json")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: passNobody, Gid: passNobody}}
	err := cmd.Run()
	res := result{Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.Code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running holdfast sync as uid %d: %v", passNobody, err)
	}
	return res
}

// passOpenTo lets uid 65534 reach d's socket and run the holdfast binary:
// search permission on every directory above them, and the socket writable.
func passOpenTo(t *testing.T, d *daemon) {
	t.Helper()
	for _, p := range []string{d.Address, holdfastBin} {
		for dir := filepath.Dir(p); dir != "/"; dir = filepath.Dir(dir) {
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm()&0o001 == 0 {
				if err := os.Chmod(dir, fi.Mode().Perm()|0o011); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := os.Chmod(d.Address, 0o666); err != nil {
		t.Fatal(err)
	}
}

// TestPassUnreadableListsKeep: a pull list and a pin list that `holdfast sync`
// cannot read (it runs as an unprivileged user; the lists are mode 000) keep
// what they had: their images stay pinned and their leases stay, as for an
// unreadable archive; the failure names each file. Readable again, they
// unpin nothing; deleted, their images are unpinned.
func TestPassUnreadableListsKeep(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		dataDir := filepath.Join(dir, "data")
		if err := os.MkdirAll(imagesDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dataDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dataDir, passNobody, passNobody); err != nil {
			t.Fatal(err)
		}
		passOpenTo(t, d)
		if err := os.Chmod(dir, 0o711); err != nil {
			t.Fatal(err)
		}

		// Two images brought by no holdfast source: the lists pin them.
		pullName, pinName := "e2e.local/pass/listed:1", "e2e.local/pass/patterned:1"
		for _, n := range []string{pullName, pinName} {
			img := build(t, fixture.ImageSpec{Names: []string{n}})
			pr, pw := io.Pipe()
			go func() {
				pw.CloseWithError(fixture.WriteOCI(context.Background(), pw, fixture.OCIOptions{Names: fixture.NameContainerd}, img))
			}()
			if _, err := d.Client.Import(d.ctx(), pr); err != nil {
				t.Fatalf("importing %s: %v", n, err)
			}
		}
		pullList := filepath.Join(imagesDir, "pull.txt")
		pinList := filepath.Join(imagesDir, "keep.pins")
		if err := os.WriteFile(pullList, []byte(pullName+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pinList, []byte("e2e.local/pass/patterned\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		res := passSyncAsNobody(t, d, dataDir, imagesDir)
		if res.Code != 0 {
			t.Fatalf("sync as uid %d exited %d\n%s\n%s", passNobody, res.Code, res.Stdout, res.Stderr)
		}
		d.requirePinned(t, pullName, pinName)
		leaseIDs := map[string]string{}
		for _, p := range []string{pullList, pinList} {
			l, ok := d.leaseOf(t, p)
			if !ok {
				t.Fatalf("%s has no lease", p)
			}
			leaseIDs[p] = l.ID
		}

		// Unreadable: both keep what they had.
		for _, p := range []string{pullList, pinList} {
			if err := os.Chmod(p, 0); err != nil {
				t.Fatal(err)
			}
		}
		res = passSyncAsNobody(t, d, dataDir, imagesDir)
		c := summaryCounts(t, res.Stdout)
		if res.Code != 1 || c["unpinned"] != 0 || c["released"] != 0 {
			t.Errorf("sync with unreadable lists: exit %d, %v; want exit 1, nothing unpinned or released\n%s\n%s", res.Code, c, res.Stdout, res.Stderr)
		}
		for _, p := range []string{pullList, pinList} {
			if !strings.Contains(res.Stderr, "reading "+p+": permission denied") {
				t.Errorf("the failure does not name %s and the cause:\n%s", p, res.Stderr)
			}
			if l, ok := d.leaseOf(t, p); !ok || l.ID != leaseIDs[p] {
				t.Errorf("%s: lease %q, want %q kept", p, l.ID, leaseIDs[p])
			}
		}
		d.requirePinned(t, pullName, pinName)

		// Readable again (the chmod changed their ctime: each is leased anew
		// and its old lease replaced): nothing is unpinned.
		for _, p := range []string{pullList, pinList} {
			if err := os.Chmod(p, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		res = passSyncAsNobody(t, d, dataDir, imagesDir)
		if c := summaryCounts(t, res.Stdout); res.Code != 0 || c["unpinned"] != 0 {
			t.Errorf("sync with the lists readable again: exit %d, %v\n%s", res.Code, c, res.Stderr)
		}
		d.requirePinned(t, pullName, pinName)

		// Deleted: their images are unpinned and their leases released.
		for _, p := range []string{pullList, pinList} {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
		res = passSyncAsNobody(t, d, dataDir, imagesDir)
		if c := summaryCounts(t, res.Stdout); res.Code != 0 || c["released"] != 2 {
			t.Errorf("sync with the lists deleted: exit %d, %v\n%s", res.Code, c, res.Stderr)
		}
		for _, n := range []string{pullName, pinName} {
			if cri, hf := d.pinnedBy(t, n); cri || hf {
				t.Errorf("%s still pinned after its list was deleted", n)
			}
		}
	})
}

package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/leases"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// passLeasedBlobs is the set of blobs some holdfast lease holds now. It reads
// with the client directly (no t), so a goroutine can call it.
func passLeasedBlobs(ctx context.Context, d *daemon) (map[digest.Digest]bool, error) {
	all, err := d.Client.LeasesService().List(ctx)
	if err != nil {
		return nil, err
	}
	held := map[digest.Digest]bool{}
	for _, l := range all {
		if !strings.HasPrefix(l.ID, "holdfast/") {
			continue
		}
		res, err := d.Client.LeasesService().ListResources(ctx, leases.Lease{ID: l.ID})
		if err != nil {
			continue // released meanwhile
		}
		for _, r := range res {
			if r.Type == "content" {
				held[digest.Digest(r.ID)] = true
			}
		}
	}
	return held, nil
}

// passLeaseWatch checks, until stopped, that every one of blobs is in some
// holdfast lease. A snapshot (list the leases, then each one's resources) can
// miss a blob while one lease is released just after another took it over,
// so a gap counts only when two snapshots in a row miss the same blob.
type passLeaseWatch struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	gaps []string
	n    int // snapshots taken
}

func passWatchLeases(d *daemon, blobs []ocispec.Descriptor) *passLeaseWatch {
	w := &passLeaseWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		missedBefore := map[digest.Digest]bool{}
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			held, err := passLeasedBlobs(d.ctx(), d)
			if err != nil {
				continue
			}
			missed := map[digest.Digest]bool{}
			gap := 0
			for _, b := range blobs {
				if !held[b.Digest] {
					missed[b.Digest] = true
					if missedBefore[b.Digest] {
						gap++
					}
				}
			}
			missedBefore = missed
			w.mu.Lock()
			w.n++
			if gap > 0 {
				w.gaps = append(w.gaps, fmt.Sprintf("%d of %d blobs at %s", gap, len(blobs), time.Now().Format("15:04:05.000")))
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// end stops the watch and returns the gaps seen and the number of snapshots.
func (w *passLeaseWatch) end() ([]string, int) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gaps, w.n
}

// TestPassUpgradeKeepsSharedImagePinned: under `holdfast run --settle 2s`, a
// bundle upgraded the usual way — the new archive copied in under a temporary
// name and renamed into place, then the old one deleted — where both archives
// hold the same image: while the new archive settles, the shared image keeps
// its pin and its content stays leased; once it is imported, the old archive's
// own image is unpinned and its lease released.
func TestPassUpgradeKeepsSharedImagePinned(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	shared := build(t, fixture.ImageSpec{Names: []string{"e2e.local/pass/shared:1"}, Layers: fixture.UniformLayers(4, 1<<20, false, 4101)})
	oldOnly := build(t, fixture.ImageSpec{Names: []string{"e2e.local/pass/old:1"}})
	newOnly := build(t, fixture.ImageSpec{Names: []string{"e2e.local/pass/new:1"}})
	v1 := filepath.Join(imagesDir, "bundle-v1.tar")
	v2 := filepath.Join(imagesDir, "bundle-v2.tar")
	writeDockerSave(t, v1, shared, oldOnly)
	staging := filepath.Join(filepath.Dir(imagesDir), "new.tar")
	writeDockerSave(t, staging, shared, newOnly)
	data, err := os.ReadFile(staging)
	if err != nil {
		t.Fatal(err)
	}

	agent := startAgent(t, d, dataDir, []string{imagesDir}, "--settle", "2s")
	eventually(t, "ready", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })
	d.waitPinned(t, "e2e.local/pass/shared:1", "e2e.local/pass/old:1")
	oldLease, ok := d.leaseOf(t, v1)
	if !ok {
		t.Fatal("bundle-v1.tar has no lease")
	}
	rec, _ := d.record(t, "e2e.local/pass/shared:1")
	blobs := d.hostBlobs(t, rec.Target)
	sharedNames := map[string]bool{}
	for _, n := range d.recordNames(t) {
		if strings.HasPrefix(n, "e2e.local/pass/shared") {
			sharedNames[n] = true
		}
	}
	events := watchImages(t, d, rec.Target)
	leased := passWatchLeases(d, blobs)

	// cp new.tar images/bundle-v2.tar.tmp && mv images/bundle-v2.tar.tmp images/bundle-v2.tar && rm images/bundle-v1.tar
	if err := os.WriteFile(v2+".tmp", data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(v2+".tmp", v2); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(v1); err != nil {
		t.Fatal(err)
	}

	d.waitPinned(t, "e2e.local/pass/new:1")
	eventually(t, "old:1 unpinned", func() bool { cri, hf := d.pinnedBy(t, "e2e.local/pass/old:1"); return !cri && !hf })
	eventually(t, "bundle-v1.tar's lease released", func() bool { _, ok := d.leaseOf(t, v1); return !ok })
	gaps, snapshots := leased.end()
	for _, e := range events.flush(t) {
		if sharedNames[e.Name] && (e.Kind == "delete" || !e.pinned()) {
			t.Errorf("the shared image lost its pin during the upgrade: %s %s %v", e.Kind, e.Name, e.Labels)
		}
	}
	if len(gaps) > 0 {
		t.Errorf("the shared image's content was in no holdfast lease during the upgrade: %d of %d snapshots missed, from %s to %s",
			len(gaps), snapshots, gaps[0], gaps[len(gaps)-1])
	}
	d.requirePinned(t, "e2e.local/pass/shared:1", "e2e.local/pass/new:1")
	// The upgrade did go through a pass that saw bundle-v2.tar still being
	// written and bundle-v1.tar gone: that pass kept the old lease.
	if agent.logged("kept while a source is still being written", map[string]string{"lease": oldLease.ID}) == 0 {
		t.Errorf("no pass saw bundle-v1.tar gone while bundle-v2.tar settled:\n%s", tail(agent.dump(), 40))
	}
}

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
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: passNobody, Gid: passNobody}}
	return runHoldfast(t, cmd)
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

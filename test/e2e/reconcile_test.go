package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

// summaryCounts reads the counts from sync's summary line.
func summaryCounts(t *testing.T, stdout string) map[string]int {
	t.Helper()
	m := regexp.MustCompile(`(\d+) (imported|unchanged|healed|unpinned|failed|released|drift|conflicts)`).FindAllStringSubmatch(stdout, -1)
	if len(m) == 0 {
		t.Fatalf("no summary in %q", stdout)
	}
	out := map[string]int{}
	for _, g := range m {
		n, _ := strconv.Atoi(g[1])
		out[g[2]] = n
	}
	return out
}

// syncOK runs sync and fails the test unless it exits 0.
func (d *daemon) syncOK(t *testing.T, dataDir string, imageDirs ...string) map[string]int {
	t.Helper()
	res := d.sync(t, dataDir, imageDirs...)
	if res.Code != 0 {
		t.Fatalf("sync exited %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
	}
	c := summaryCounts(t, res.Stdout)
	c["bytes0"] = 0
	if strings.Contains(res.Stdout, " 0 B read") {
		c["bytes0"] = 1
	}
	return c
}

// pinned reports both labels on a record.
func (d *daemon) pinnedBy(t *testing.T, name string) (cri, holdfast bool) {
	t.Helper()
	rec, ok := d.record(t, name)
	if !ok {
		return false, false
	}
	return rec.Labels["io.cri-containerd.pinned"] == "pinned", rec.Labels["io.holdfast.pinned"] == "pinned"
}

func (d *daemon) requirePinned(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if cri, hf := d.pinnedBy(t, n); !cri || !hf {
			t.Errorf("%s: CRI pin %v, holdfast pin %v; want both", n, cri, hf)
		}
	}
}

// crictl runs crictl against d.
func (d *daemon) crictl(t *testing.T, args ...string) {
	t.Helper()
	bin, err := exec.LookPath("crictl")
	if err != nil {
		testenv.Missing(t, "crictl", fmt.Sprintf("crictl is not on PATH (make deps installs it into bin/): %v", err))
	}
	ep := "unix://" + d.Address
	cmd := exec.Command(bin, append([]string{"--runtime-endpoint", ep, "--image-endpoint", ep, "--timeout", "20s"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("crictl %v: %v\n%s", args, err, out)
	}
}

// deleteImageSync deletes every record pointing at target (the names and the
// CRI's sha256: record), the last one with a synchronous delete so that
// containerd's GC has run when it returns. It first waits until the CRI knows
// the image, so the CRI's own record is not created after the delete.
func (d *daemon) deleteImageSync(t *testing.T, target digest.Digest) {
	t.Helper()
	list := func() []string {
		all, err := d.Client.ImageService().List(d.ctx())
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, img := range all {
			if img.Target.Digest == target {
				names = append(names, img.Name)
			}
		}
		return names
	}
	names := list()
	if len(names) == 0 {
		t.Fatalf("no record points at %s", target)
	}
	eventually(t, "the CRI to know "+names[0], func() bool {
		found, _ := d.criImage(t, names[0])
		return found
	})
	names = list()
	for i, n := range names {
		var opts []images.DeleteOpt
		if i == len(names)-1 {
			opts = append(opts, images.SynchronousDelete())
		}
		if err := d.Client.ImageService().Delete(d.ctx(), n, opts...); err != nil {
			t.Fatalf("deleting %s: %v", n, err)
		}
	}
}

func writeDockerSave(t *testing.T, path string, imgs ...*fixture.Image) {
	t.Helper()
	writeArchive(t, path, fixture.None, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteDockerSave(ctx, w, imgs...)
	})
}

// TestRestarts covers what a restart must never do: read unchanged archives
// again, unpin what is still wanted, or touch pins holdfast does not own; and
// what it must do: unpin what is gone, and heal what was deleted. On both
// write paths.
func TestRestarts(t *testing.T) {
	forEachLineAndPath(t, func(t *testing.T, d *daemon, wp string) {
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		dataDir := filepath.Join(dir, "data")
		shared := sharedLayer(t, 7)
		a := build(t, fixture.ImageSpec{Names: []string{"e2e.local/re/a:1"}, SharedLayers: []*fixture.Layer{shared}})
		b := build(t, fixture.ImageSpec{Names: []string{"e2e.local/re/b:1", "e2e.local/re/both:1"}, SharedLayers: []*fixture.Layer{shared}})
		pathA := filepath.Join(imagesDir, "a.tar")
		writeDockerSave(t, pathA, a)
		writeArchive(t, filepath.Join(imagesDir, "b.tar.zst"), fixture.Zstd, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
			return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerd}, b)
		})

		// (c) a record pinned by hand, unknown to holdfast.
		user := build(t, fixture.ImageSpec{Names: []string{"e2e.local/re/user:1"}})
		userLabels := map[string]string{"io.cri-containerd.pinned": "pinned", "owner": "ops"}
		if _, err := d.Client.ImageService().Create(d.ctx(), images.Image{Name: "e2e.local/re/user:1", Target: user.Target, Labels: userLabels}); err != nil {
			t.Fatal(err)
		}
		// (d) a record pinned by hand that an archive also holds.
		if _, err := d.Client.ImageService().Create(d.ctx(), images.Image{Name: "e2e.local/re/a:1", Target: a.Target,
			Labels: map[string]string{"io.cri-containerd.pinned": "pinned"}}); err != nil {
			t.Fatal(err)
		}

		c, log := d.wpSyncOK(t, wp, dataDir, imagesDir)
		if c["imported"] != 2 {
			t.Fatalf("first sync: %v", c)
		}
		wpRequirePlaced(t, wp, log, pathA, filepath.Join(imagesDir, "b.tar.zst"))
		d.requirePinned(t, "e2e.local/re/a:1", "e2e.local/re/b:1", "e2e.local/re/both:1")
		if rec, _ := d.record(t, "e2e.local/re/a:1"); rec.Labels["io.holdfast.prior-pin"] != "true" {
			t.Errorf("(d) the user's earlier pin is not recorded: %v", rec.Labels)
		}
		// Each archive's lease holds every blob of its image, the shared layer too.
		for path, img := range map[string]*fixture.Image{pathA: a, filepath.Join(imagesDir, "b.tar.zst"): b} {
			l, ok := d.leaseOf(t, path)
			if !ok {
				t.Fatalf("no lease for %s", path)
			}
			held := d.leaseContent(t, l)
			rec, _ := d.record(t, img.Names[0])
			for _, blob := range d.hostBlobs(t, rec.Target) {
				if !held[blob.Digest] {
					t.Errorf("the lease of %s lacks %s %s", filepath.Base(path), blob.MediaType, blob.Digest)
				}
			}
		}

		// (a) nothing changed: nothing read, all still pinned.
		c, _ = d.wpSyncOK(t, wp, dataDir, imagesDir)
		if c["imported"] != 0 || c["unchanged"] != 2 || c["bytes0"] != 1 {
			t.Errorf("(a) unchanged sync: %v", c)
		}
		d.requirePinned(t, "e2e.local/re/a:1", "e2e.local/re/b:1", "e2e.local/re/both:1")

		// (b)+(d) archive a deleted: its image unpinned but for the user's own pin, its lease gone.
		leaseA, ok := d.leaseOf(t, pathA)
		if !ok {
			t.Fatal("no lease for a.tar")
		}
		if err := os.Remove(pathA); err != nil {
			t.Fatal(err)
		}
		c, _ = d.wpSyncOK(t, wp, dataDir, imagesDir)
		if c["unpinned"] < 1 || c["released"] != 1 {
			t.Errorf("(b) after deleting a.tar: %v", c)
		}
		rec, _ := d.record(t, "e2e.local/re/a:1")
		if rec.Labels["io.holdfast.pinned"] != "" || rec.Labels["io.holdfast.prior-pin"] != "" {
			t.Errorf("(d) holdfast's labels stayed: %v", rec.Labels)
		}
		if rec.Labels["io.cri-containerd.pinned"] != "pinned" {
			t.Errorf("(d) the user's pin was removed: %v", rec.Labels)
		}
		if _, ok := d.leaseOf(t, pathA); ok {
			t.Errorf("(b) lease %s of the deleted archive is still there", leaseA.ID)
		}
		// a's digest record had no user pin: both labels gone.
		for _, n := range d.recordNames(t) {
			if strings.HasPrefix(n, "e2e.local/re/a@") {
				if cri, hf := d.pinnedBy(t, n); cri || hf {
					t.Errorf("(b) %s still pinned: cri %v holdfast %v", n, cri, hf)
				}
			}
		}
		d.requirePinned(t, "e2e.local/re/b:1", "e2e.local/re/both:1")

		// (b) the surviving image deleted with crictl rmi, and a's records
		// deleted too, so that nothing but b's lease holds the shared layer
		// when GC runs (a's own layer, in no lease any more, goes): the next
		// sync heals b from leased content.
		recA, _ := d.record(t, "e2e.local/re/a:1")
		d.crictl(t, "rmi", "e2e.local/re/b:1")
		if _, ok := d.record(t, "e2e.local/re/both:1"); ok {
			t.Fatal("crictl rmi left the image's other name")
		}
		d.deleteImageSync(t, recA.Target.Digest)
		aOwn := a.Manifests[0].Layers[len(a.Manifests[0].Layers)-1].Digest()
		eventually(t, "GC to remove a's own layer", func() bool { return !d.hasBlob(t, aOwn) })
		if !d.hasBlob(t, shared.Digest()) {
			t.Errorf("(b) GC removed the shared layer although b's lease should hold it")
		}
		c, _ = d.wpSyncOK(t, wp, dataDir, imagesDir)
		if c["healed"] < 2 || c["imported"] != 0 || c["bytes0"] != 1 {
			t.Errorf("(b) heal after crictl rmi: %v", c)
		}
		d.requirePinned(t, "e2e.local/re/b:1", "e2e.local/re/both:1")
		rb, _ := d.record(t, "e2e.local/re/b:1")
		for _, blob := range d.hostBlobs(t, rb.Target) {
			if !d.hasBlob(t, blob.Digest) {
				t.Errorf("(b) healed image lacks %s", blob.Digest)
			}
		}

		// (c) the hand-pinned image was never touched.
		u, _ := d.record(t, "e2e.local/re/user:1")
		if fmt.Sprint(u.Labels) != fmt.Sprint(userLabels) || u.Target.Digest != user.Target.Digest {
			t.Errorf("(c) user's record changed: %v %s", u.Labels, u.Target.Digest)
		}
		if !d.Old {
			if found, pinned := d.criImage(t, "e2e.local/re/b:1"); !found || !pinned {
				t.Errorf("CRI: healed image found %v pinned %v", found, pinned)
			}
		}
	})
}

// TestHealAfterGC proves containerd's GC really ran: an unleased control image
// deleted the same way loses its blobs, while holdfast restores the wanted one
// from its lease without reading the archive. On both write paths: blobs
// written directly are held by the lease as streamed ones are.
func TestHealAfterGC(t *testing.T) {
	forEachDaemonAndPath(t, func(t *testing.T, d *daemon, wp string) {
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		dataDir := filepath.Join(dir, "data")
		wanted := build(t, fixture.ImageSpec{Names: []string{"e2e.local/gc/wanted:1"}})
		writeDockerSave(t, filepath.Join(imagesDir, "wanted.tar"), wanted)
		_, log := d.wpSyncOK(t, wp, dataDir, imagesDir)
		wpRequirePlaced(t, wp, log, filepath.Join(imagesDir, "wanted.tar"))

		control := build(t, fixture.ImageSpec{Names: []string{"e2e.local/gc/control:1"}})
		pr, pw := io.Pipe()
		go func() {
			pw.CloseWithError(fixture.WriteOCI(context.Background(), pw, fixture.OCIOptions{Names: fixture.NameContainerd}, control))
		}()
		if _, err := d.Client.Import(d.ctx(), pr); err != nil {
			t.Fatalf("importing the control image: %v", err)
		}
		controlLayer := control.Manifests[0].Layers[0].Digest()
		if !d.hasBlob(t, controlLayer) {
			t.Fatal("control image's layer not in the store")
		}
		rec, _ := d.record(t, "e2e.local/gc/wanted:1")
		d.deleteImageSync(t, control.Target.Digest)
		d.deleteImageSync(t, rec.Target.Digest)
		eventually(t, "GC to remove the control image's layer", func() bool { return !d.hasBlob(t, controlLayer) })

		c, _ := d.wpSyncOK(t, wp, dataDir, imagesDir)
		if c["healed"] < 1 || c["imported"] != 0 || c["bytes0"] != 1 {
			t.Errorf("heal after GC: %v", c)
		}
		d.requirePinned(t, "e2e.local/gc/wanted:1")
		for _, blob := range d.hostBlobs(t, rec.Target) {
			if !d.hasBlob(t, blob.Digest) {
				t.Errorf("healed image lacks %s", blob.Digest)
			}
		}
		if !d.Old {
			eventually(t, "CRI to see the healed image pinned", func() bool {
				found, pinned := d.criImage(t, "e2e.local/gc/wanted:1")
				return found && pinned
			})
		}
	})
}

// TestDataDirLost: desired state lives in containerd, so a lost data dir
// changes nothing: the next sync still unpins exactly what is gone and heals.
func TestDataDirLost(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	x := build(t, fixture.ImageSpec{Names: []string{"e2e.local/lost/x:1"}})
	y := build(t, fixture.ImageSpec{Names: []string{"e2e.local/lost/y:1"}})
	writeDockerSave(t, filepath.Join(imagesDir, "x.tar"), x)
	writeDockerSave(t, filepath.Join(imagesDir, "y.tar"), y)
	d.syncOK(t, dataDir, imagesDir)

	if err := os.RemoveAll(dataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(imagesDir, "x.tar")); err != nil {
		t.Fatal(err)
	}
	d.crictl(t, "rmi", "e2e.local/lost/y:1")
	c := d.syncOK(t, dataDir, imagesDir)
	if c["unpinned"] < 1 || c["healed"] < 1 || c["released"] != 1 || c["bytes0"] != 1 {
		t.Errorf("sync after losing the data dir: %v", c)
	}
	if cri, hf := d.pinnedBy(t, "e2e.local/lost/x:1"); cri || hf {
		t.Errorf("x still pinned: %v %v", cri, hf)
	}
	d.requirePinned(t, "e2e.local/lost/y:1")

	// A sync pointed at another (empty) images dir judges only that dir: it
	// unpins and releases nothing of this one's.
	other := filepath.Join(filepath.Dir(imagesDir), "other-images")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	c = d.syncOK(t, filepath.Join(filepath.Dir(imagesDir), "other-data"), other)
	if c["unpinned"] != 0 || c["released"] != 0 {
		t.Errorf("a sync of another images dir changed this one's: %v", c)
	}
	d.requirePinned(t, "e2e.local/lost/y:1")
}

// TestConflictAndDrift: the same name from two archives goes to the newest
// archive and is reported; a pinned name re-pointed by someone else is restored.
func TestConflictAndDrift(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	older := build(t, fixture.ImageSpec{Names: []string{"e2e.local/cf/app:1"}, Labels: map[string]string{"v": "old"}})
	newer := build(t, fixture.ImageSpec{Names: []string{"e2e.local/cf/app:1"}, Labels: map[string]string{"v": "new"}})
	other := build(t, fixture.ImageSpec{Names: []string{"e2e.local/cf/other:1"}})
	oldPath, newPath := filepath.Join(imagesDir, "z-old.tar"), filepath.Join(imagesDir, "a-new.tar")
	writeDockerSave(t, oldPath, older)
	writeDockerSave(t, newPath, newer)
	writeDockerSave(t, filepath.Join(imagesDir, "other.tar"), other)
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(oldPath, past, past); err != nil {
		t.Fatal(err)
	}
	res := d.sync(t, dataDir, imagesDir)
	if res.Code != 0 || !strings.Contains(res.Stdout, "conflict: e2e.local/cf/app:1") || !strings.Contains(res.Stdout, newPath) {
		t.Fatalf("sync with a conflict: exit %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	rec, _ := d.record(t, "e2e.local/cf/app:1")
	recNewer, _ := d.record(t, "e2e.local/cf/app@"+newer.Target.Digest.String())
	if rec.Target.Digest != recNewer.Target.Digest || rec.Target.Digest == "" {
		t.Errorf("app:1 points at %s, want the newer archive's", rec.Target.Digest)
	}
	st := holdfast(t, "status", "-o", "json", "--address", d.Address, "--data-dir", dataDir)
	var sj struct {
		Images []struct {
			Name      string            `json:"name"`
			Conflicts []json.RawMessage `json:"conflicts"`
		} `json:"images"`
	}
	if err := json.Unmarshal([]byte(st.Stdout), &sj); err != nil {
		t.Fatalf("status: %v\n%s", err, st.Stdout)
	}
	reported := false
	for _, im := range sj.Images {
		if im.Name == "e2e.local/cf/app:1" && len(im.Conflicts) == 1 {
			reported = true
		}
	}
	if !reported {
		t.Errorf("status does not report the conflict:\n%s", st.Stdout)
	}
	// The loser's content stays leased while its archive exists.
	lease, _ := d.leaseOf(t, oldPath)
	if !d.leaseContent(t, lease)[older.Manifests[0].Config.Digest] {
		t.Errorf("the losing archive's config is not leased")
	}

	// Drift: re-point the pinned name at another image, as `ctr images tag --force` does.
	otherRec, _ := d.record(t, "e2e.local/cf/other:1")
	rec.Target = otherRec.Target
	if _, err := d.Client.ImageService().Update(d.ctx(), rec, "target"); err != nil {
		t.Fatal(err)
	}
	c := d.syncOK(t, dataDir, imagesDir)
	if c["drift"] != 1 {
		t.Errorf("drift not reported: %v", c)
	}
	if rec2, _ := d.record(t, "e2e.local/cf/app:1"); rec2.Target.Digest != recNewer.Target.Digest {
		t.Errorf("drift not restored: %s", rec2.Target.Digest)
	}
}

// TestReplacedArchive: an archive replaced in place with a new image under
// the same name: the new target is pinned, and the old version's own blobs are
// in no holdfast lease any more.
func TestReplacedArchive(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	path := filepath.Join(imagesDir, "app.tar")
	v1 := build(t, fixture.ImageSpec{Names: []string{"e2e.local/rp/app:1"}, Layers: fixture.UniformLayers(2, 64<<10, false, 101)})
	v2 := build(t, fixture.ImageSpec{Names: []string{"e2e.local/rp/app:1"}, Layers: fixture.UniformLayers(2, 64<<10, false, 202)})
	writeDockerSave(t, path, v1)
	d.syncOK(t, dataDir, imagesDir)
	writeDockerSave(t, path, v2) // written beside it and renamed into place
	c := d.syncOK(t, dataDir, imagesDir)
	if c["imported"] != 1 || c["released"] != 1 {
		t.Errorf("replace: %v", c)
	}
	rec, _ := d.record(t, "e2e.local/rp/app:1")
	if cfg := d.hostBlobs(t, rec.Target); !containsDigest(cfg, v2.Manifests[0].Config.Digest) {
		t.Errorf("app:1 does not point at the new version")
	}
	d.requirePinned(t, "e2e.local/rp/app:1")
	for _, l := range d.holdfastLeases(t) {
		held := d.leaseContent(t, l)
		for _, layer := range v1.Manifests[0].Layers {
			if held[layer.Digest()] {
				t.Errorf("lease %s still holds old layer %s", l.ID, layer.Digest())
			}
		}
	}
}

// TestNoTransientUnpin watches every /images/ event while syncs run: neither a
// sync that changes nothing nor one that moves an image from one archive to
// another ever deletes a wanted name or removes a pin label from one. On
// every line.
func TestNoTransientUnpin(t *testing.T) {
	forEachLine(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		x := build(t, fixture.ImageSpec{Names: []string{"e2e.local/tx/x:1"}})
		y := build(t, fixture.ImageSpec{Names: []string{"e2e.local/tx/y:1"}})
		writeDockerSave(t, filepath.Join(imagesDir, "one.tar"), x, y)
		d.syncOK(t, dataDir, imagesDir)
		wanted := map[string]bool{}
		for _, n := range d.recordNames(t) {
			if strings.HasPrefix(n, "e2e.local/tx/") {
				wanted[n] = true
			}
		}

		w := watchImages(t, d, x.Target)
		check := func(evs []imageEvent) {
			t.Helper()
			for _, e := range evs {
				if !wanted[e.Name] {
					continue
				}
				if e.Kind == "delete" || !e.pinned() {
					t.Errorf("a wanted name lost its pin: %s %s %v", e.Kind, e.Name, e.Labels)
				}
			}
		}

		// (i) nothing changes.
		d.syncOK(t, dataDir, imagesDir)
		check(w.flush(t))
		// (ii) y moves from one.tar to two.tar.
		writeDockerSave(t, filepath.Join(imagesDir, "two.tar"), y)
		writeDockerSave(t, filepath.Join(imagesDir, "one.tar"), x)
		c := d.syncOK(t, dataDir, imagesDir)
		if c["imported"] != 2 || c["released"] != 1 {
			t.Errorf("move: %v", c)
		}
		check(w.flush(t))
		d.requirePinned(t, "e2e.local/tx/x:1", "e2e.local/tx/y:1")
	})
}

func containsDigest(ds []ocispec.Descriptor, d digest.Digest) bool {
	for _, x := range ds {
		if x.Digest == d {
			return true
		}
	}
	return false
}

// TestHealFallsBackToArchive: when leased blobs were deleted too (`ctr content
// rm`), the leased content cannot restore the image, and the next sync reads
// the archive again.
func TestHealFallsBackToArchive(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	im := build(t, fixture.ImageSpec{Names: []string{"e2e.local/fb/app:1"}})
	writeDockerSave(t, filepath.Join(imagesDir, "app.tar"), im)
	d.syncOK(t, dataDir, imagesDir)

	rec, _ := d.record(t, "e2e.local/fb/app:1")
	layer := im.Manifests[0].Layers[0].Digest()
	if err := d.Client.ContentStore().Delete(d.ctx(), layer); err != nil {
		t.Fatalf("deleting a leased layer: %v", err)
	}
	d.deleteImageSync(t, rec.Target.Digest)
	// plan sees the missing layer the way sync does.
	res := holdfast(t, "plan", "-o", "json", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir)
	var plan struct {
		Actions []struct{ Action, Source, Reason string } `json:"actions"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &plan); res.Code != 0 || err != nil {
		t.Fatalf("plan: %d %v %s %s", res.Code, err, res.Stdout, res.Stderr)
	}
	if !slices.ContainsFunc(plan.Actions, func(a struct{ Action, Source, Reason string }) bool {
		return a.Action == "import" && filepath.Base(a.Source) == "app.tar" && a.Reason == "leased content is gone"
	}) {
		t.Errorf("plan does not import app.tar again because its leased content is gone: %+v", plan.Actions)
	}
	c := d.syncOK(t, dataDir, imagesDir)
	if c["imported"] != 1 || c["bytes0"] != 0 {
		t.Errorf("sync did not read the archive again: %v", c)
	}
	d.requirePinned(t, "e2e.local/fb/app:1")
	if !d.hasBlob(t, layer) {
		t.Errorf("layer %s not restored", layer)
	}
}

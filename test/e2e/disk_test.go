package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/embedded"
	"github.com/holdfast-project/holdfast/internal/fixture"
)

// diskScene starts an embedded containerd whose whole data dir (root, content
// store, metadata) is on a tmpfs of size bytes, and returns it, its mount
// point, an images dir and a data dir for holdfast (both on the ordinary
// disk, neither created).
func diskScene(t *testing.T, size int64) (d *daemon, mnt, imagesDir, dataDir string) {
	t.Helper()
	requireRoot(t)
	t.Parallel()
	dir := tempDir(t) // its clean-up unmounts what is under it, after containerd stopped
	mnt = filepath.Join(dir, "m")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatalf("mounting a tmpfs on %s: %v", mnt, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := embedded.Start(ctx, mnt, embedded.Options{Binary: holdfastBin})
	if err != nil {
		t.Fatalf("starting embedded containerd on %s: %v", mnt, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("stopping embedded containerd: %v", err)
		}
	})
	d = connect(t, "embedded-small-disk", p.Address(), false)
	return d, mnt, filepath.Join(dir, "images"), filepath.Join(dir, "data")
}

// diskFree is what df shows as available on the filesystem of path.
func diskFree(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// diskFill writes a file of zeros at path until the filesystem has about
// leave bytes available.
func diskFill(t *testing.T, path string, leave int64) {
	t.Helper()
	n := diskFree(t, filepath.Dir(path)) - leave
	if n <= 0 {
		t.Fatalf("only %d bytes free, want more than %d", diskFree(t, filepath.Dir(path)), leave)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// tmpfs allocates pages only when written: write the zeros.
	if _, err := io.CopyN(f, zeroReader{}, n); err != nil {
		t.Fatalf("filling %s: %v", path, err)
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// diskImage is an image of n incompressible layers of size bytes each.
func diskImage(t *testing.T, name string, n int, size int64, seed int64) *fixture.Image {
	t.Helper()
	return build(t, fixture.ImageSpec{Names: []string{name}, Layers: fixture.UniformLayers(n, size, false, seed)})
}

// diskLayers lists the layer digests of img on the host platform.
func diskLayers(t *testing.T, img *fixture.Image) []digest.Digest {
	t.Helper()
	var out []digest.Digest
	for _, l := range img.Manifests[0].Layers {
		out = append(out, l.DiffID()) // uncompressed layers: the blob is the tar
	}
	if len(out) == 0 {
		t.Fatal("image has no layers")
	}
	return out
}

// diskNothingOf fails the test if anything of the archive at path, whose image
// is img, is in the store: a lease, a record, an ingest or a layer blob.
func (d *daemon) diskNothingOf(t *testing.T, path string, img *fixture.Image) {
	t.Helper()
	if l, ok := d.leaseOf(t, path); ok {
		t.Errorf("lease %s of %s is left", l.ID, path)
	}
	for _, n := range img.Names {
		if _, ok := d.record(t, n); ok {
			t.Errorf("record %s was written", n)
		}
	}
	if ing := d.ingests(t); len(ing) > 0 {
		t.Errorf("ingests left: %v", ing)
	}
	for _, l := range diskLayers(t, img) {
		if d.hasBlob(t, l) {
			t.Errorf("layer %s is in the store", l)
		}
	}
}

var diskNumbers = regexp.MustCompile(`needs? \S+ \S+ \((\d+) bytes\) in containerd's content store \(([^)]*)\), \S+ \S+ \((\d+) bytes\) is free there and .+? must stay free`)

// diskRefusal reads the bytes needed and free from a refusal, and the content root it names.
func diskRefusal(t *testing.T, out string) (need, free int64, root string) {
	t.Helper()
	m := diskNumbers.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no refusal with numbers in:\n%s", out)
	}
	need, _ = strconv.ParseInt(m[1], 10, 64)
	free, _ = strconv.ParseInt(m[3], 10, 64)
	return need, free, m[2]
}

// TestDiskArchiveThatWouldNotFitIsRefused: an archive larger than the free
// space of containerd's content store is refused before anything of it is
// written, with the bytes needed and free in the error; the images pinned
// before stay. One that fits, but would leave less than --min-free, is
// refused the same way; under the agent, a refusal is retried, and the
// archive imported once space is freed.
func TestDiskArchiveThatWouldNotFitIsRefused(t *testing.T) {
	d, mnt, imagesDir, dataDir := diskScene(t, 64<<20)

	small := build(t, fixture.ImageSpec{Names: []string{"example.com/disk/small:1"}})
	writeDockerSave(t, filepath.Join(imagesDir, "small.tar"), small)
	d.syncOK(t, dataDir, imagesDir)
	d.requirePinned(t, "example.com/disk/small:1")

	// 3 × 24 MiB of random bytes: more than the whole 64 MiB filesystem.
	big := diskImage(t, "example.com/disk/big:1", 3, 24<<20, 7)
	bigPath := filepath.Join(imagesDir, "big.tar")
	writeArchive(t, bigPath, fixture.None, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteOCI(ctx, w, fixture.OCIOptions{}, big)
	})
	freeBefore := diskFree(t, mnt)
	res := d.sync(t, dataDir, imagesDir)
	out := res.Stdout + res.Stderr
	if res.Code != 1 {
		t.Fatalf("sync exited %d, want 1\n%s", res.Code, out)
	}
	if !strings.Contains(out, "import "+bigPath+": not enough disk space") {
		t.Fatalf("the error does not name %s and the cause:\n%s", bigPath, out)
	}
	need, free, root := diskRefusal(t, out)
	if need < 3*24<<20 {
		t.Errorf("needed %d bytes, less than the 3 layers' %d", need, 3*24<<20)
	}
	if free > freeBefore || free < freeBefore-1<<20 {
		t.Errorf("free %d bytes in the error; df said %d just before", free, freeBefore)
	}
	if !strings.HasPrefix(root, mnt+"/") {
		t.Errorf("the error names content root %s, not one under %s", root, mnt)
	}
	t.Logf("refused: %s", out)
	d.diskNothingOf(t, bigPath, big)
	d.requirePinned(t, "example.com/disk/small:1")
	if _, ok := d.leaseOf(t, filepath.Join(imagesDir, "small.tar")); !ok {
		t.Error("the lease of small.tar is gone")
	}

	// 20 MiB fits in the ~63 MiB free, but not with 48 MiB kept free.
	if err := os.Remove(bigPath); err != nil {
		t.Fatal(err)
	}
	mid := diskImage(t, "example.com/disk/mid:1", 2, 10<<20, 8)
	midPath := filepath.Join(imagesDir, "mid.tar")
	writeDockerSave(t, midPath, mid)
	res = holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--min-free", "48MiB")
	out = res.Stdout + res.Stderr
	if res.Code != 1 || !strings.Contains(out, "import "+midPath+": not enough disk space") {
		t.Fatalf("sync with --min-free 48MiB exited %d, want 1 and a refusal of %s:\n%s", res.Code, midPath, out)
	}
	need, free, _ = diskRefusal(t, out)
	if !strings.Contains(out, "48.0 MiB (50331648 bytes) must stay free") {
		t.Errorf("the error does not say 48 MiB must stay free:\n%s", out)
	}
	if need < 20<<20 || need > free {
		t.Errorf("needed %d bytes, free %d: want at least 20 MiB, and less than free", need, free)
	}
	d.diskNothingOf(t, midPath, mid)

	// Under the agent, with the default --min-free (5 % of 64 MiB) but the
	// disk filled so that 20 MiB do not fit, the refusal is retried and the
	// archive imported once space is freed.
	filler := filepath.Join(mnt, "filler")
	diskFill(t, filler, 16<<20)
	a := startAgent(t, d, dataDir, []string{imagesDir})
	eventually(t, "the agent to refuse the import for lack of space", func() bool {
		return a.diskLoggedError(midPath+": not enough disk space: the archive's") > 0
	})
	d.diskNothingOf(t, midPath, mid)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	d.waitPinned(t, "example.com/disk/mid:1")
	a.stop(t)
	d.requirePinned(t, "example.com/disk/small:1", "example.com/disk/mid:1")
}

// TestDiskCompressedArchiveRefusedBlobByBlob: a compressed archive's blob
// sizes are known only as the stream reaches them; the blob that would not
// fit is refused before it is written, and the import leaves nothing: the
// blobs written before it go with the import's lease.
func TestDiskCompressedArchiveRefusedBlobByBlob(t *testing.T) {
	d, mnt, imagesDir, dataDir := diskScene(t, 64<<20)
	big := diskImage(t, "example.com/disk/bigz:1", 3, 24<<20, 9)
	path := filepath.Join(imagesDir, "big.tar.gz")
	writeArchive(t, path, fixture.Gzip, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteOCI(ctx, w, fixture.OCIOptions{}, big)
	})
	freeBefore := diskFree(t, mnt)
	res := d.sync(t, dataDir, imagesDir)
	out := res.Stdout + res.Stderr
	if res.Code != 1 || !strings.Contains(out, "import "+path+": ") || !strings.Contains(out, "not enough disk space: blob sha256:") {
		t.Fatalf("sync exited %d, want 1 and a refusal of a blob of %s:\n%s", res.Code, path, out)
	}
	t.Logf("refused: %s", out)
	diskRefusal(t, out)
	d.diskNothingOf(t, path, big)
	eventually(t, "the space of the written layers to come back", func() bool {
		return diskFree(t, mnt) >= freeBefore-1<<20
	})
}

// TestDiskFullMidImport: when the content store's filesystem fills while an
// archive is written (the check could not see it coming: here it is pointed
// at another filesystem), the import fails with "no space left", leaves no
// record, no lease and no ingest of it; once space is freed, the agent's
// retry imports it, and so does a sync.
func TestDiskFullMidImport(t *testing.T) {
	d, mnt, imagesDir, dataDir := diskScene(t, 64<<20)
	first := build(t, fixture.ImageSpec{Names: []string{"example.com/disk/first:1"}})
	writeDockerSave(t, filepath.Join(imagesDir, "first.tar"), first)
	d.syncOK(t, dataDir, imagesDir)

	img := diskImage(t, "example.com/disk/full:1", 2, 10<<20, 10)
	path := filepath.Join(imagesDir, "full.tar")
	writeDockerSave(t, path, img)
	filler := filepath.Join(mnt, "filler")
	diskFill(t, filler, 12<<20) // room for one layer, not two

	elsewhere := t.TempDir() // the ordinary disk: the check sees plenty
	res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--content-root", elsewhere, "--min-free", "0")
	out := res.Stdout + res.Stderr
	if res.Code != 1 {
		t.Fatalf("sync exited %d, want 1:\n%s", res.Code, out)
	}
	if !strings.Contains(out, "import "+path+": not enough disk space: containerd's content store has no space left") ||
		!strings.Contains(out, "no space left on device") {
		t.Fatalf("the error does not name %s and say no space is left:\n%s", path, out)
	}
	t.Logf("disk full: %s", out)
	d.diskNothingOf(t, path, img)
	d.requirePinned(t, "example.com/disk/first:1")

	// The agent fails the same way, then retries once the filler is gone.
	a := startAgent(t, d, dataDir, []string{imagesDir}, "--content-root", elsewhere, "--min-free", "0")
	eventually(t, "the agent to fail the import for lack of space", func() bool {
		return a.diskLoggedError(path+": not enough disk space") > 0
	})
	d.diskNothingOf(t, path, img)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	d.waitPinned(t, "example.com/disk/full:1")
	a.stop(t)

	// A sync finds it in place (the agent's import stands).
	c := d.syncOK(t, dataDir, imagesDir)
	if c["unchanged"] != 2 {
		t.Errorf("sync after the agent: %v, want 2 unchanged", c)
	}
}

// diskLoggedError counts the agent's error lines that contain s.
func (a *agentProc) diskLoggedError(s string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, m := range a.logs {
		if m["level"] == "ERROR" && strings.Contains(fmt.Sprint(m["error"]), s) {
			n++
		}
	}
	return n
}

// TestDiskContentRoot: holdfast finds the content store's directory by asking
// containerd, on every line (1.7 and 2.2 make it only at their first write:
// the check is made all the same); a --content-root it cannot stat is
// reported once, and imports go on unchecked.
func TestDiskContentRoot(t *testing.T) {
	forEachLine(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		writeDockerSave(t, filepath.Join(imagesDir, "a.tar"), build(t, fixture.ImageSpec{Names: []string{"example.com/disk/root-a:1"}}))
		// Streamed: no probe of the direct path has containerd make the directory first.
		res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--log-level", "debug", "--write-path=stream")
		if res.Code != 0 || !strings.Contains(res.Stderr, `"msg":"imports check free disk space"`) || !strings.Contains(res.Stderr, `io.containerd.content.v1.content","from":"containerd"`) {
			t.Fatalf("sync exited %d, want 0 and the content root from containerd in the log:\n%s%s", res.Code, res.Stdout, res.Stderr)
		}

		writeDockerSave(t, filepath.Join(imagesDir, "b.tar"), build(t, fixture.ImageSpec{Names: []string{"example.com/disk/root-b:1"}}))
		missing := filepath.Join(dir, "no-such-dir")
		res = holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--content-root", missing)
		if res.Code != 0 {
			t.Fatalf("sync exited %d, want 0:\n%s%s", res.Code, res.Stdout, res.Stderr)
		}
		if n := strings.Count(res.Stderr, "free disk space is not checked before imports"); n != 1 || !strings.Contains(res.Stderr, missing) {
			t.Errorf("%d warnings naming %s, want 1:\n%s", n, missing, res.Stderr)
		}
		d.requirePinned(t, "example.com/disk/root-a:1", "example.com/disk/root-b:1")
	})
}

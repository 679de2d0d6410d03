package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// TestLargeSharedLayerLeasedBySecondSource: a layer above the size up to which
// blobs are read into memory (8 MiB), already in the store from one archive,
// is skipped by the next archive's import without being written again, and
// must still be added to that archive's lease: once the first archive is gone
// and every record of both images is deleted and GC has run, the second
// archive's image heals from its lease alone. On both write paths.
func TestLargeSharedLayerLeasedBySecondSource(t *testing.T) {
	forEachDaemonAndPath(t, func(t *testing.T, d *daemon, wp string) {
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		dataDir := filepath.Join(dir, "data")
		big, err := fixture.NewLayer(context.Background(), fixture.LayerSpec{Size: 10 << 20, Seed: 4242}, fixture.None)
		if err != nil {
			t.Fatal(err)
		}
		if big.Size() <= 8<<20 {
			t.Fatalf("the shared layer is %d bytes, want more than 8 MiB", big.Size())
		}
		a := build(t, fixture.ImageSpec{Names: []string{"e2e.local/big/a:1"}, SharedLayers: []*fixture.Layer{big}})
		b := build(t, fixture.ImageSpec{Names: []string{"e2e.local/big/b:1"}, SharedLayers: []*fixture.Layer{big}})
		pathA, pathB := filepath.Join(imagesDir, "a.tar"), filepath.Join(imagesDir, "b.tar")

		// A brings the layer into the store first.
		writeDockerSave(t, pathA, a)
		if c, log := d.wpSyncOK(t, wp, dataDir, imagesDir); c["imported"] != 1 {
			t.Fatalf("first sync: %v", c)
		} else {
			wpRequirePlaced(t, wp, log, pathA)
		}
		if !d.hasBlob(t, big.Digest()) {
			t.Fatal("the shared layer is not in the store after importing a.tar")
		}
		// B, an OCI archive whose blobs are named by digest, finds it there.
		writeArchive(t, pathB, fixture.None, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
			return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerd}, b)
		})
		if c, log := d.wpSyncOK(t, wp, dataDir, imagesDir); c["imported"] != 1 || c["unchanged"] != 1 {
			t.Fatalf("second sync: %v", c)
		} else {
			wpRequirePlaced(t, wp, log, pathB)
		}
		leaseB, ok := d.leaseOf(t, pathB)
		if !ok {
			t.Fatal("no lease for b.tar")
		}
		recB, _ := d.record(t, "e2e.local/big/b:1")
		heldB := d.leaseContent(t, leaseB)
		if !heldB[big.Digest()] {
			t.Errorf("b.tar's lease lacks the %d-byte layer that was already in the store", big.Size())
		}
		for _, blob := range d.hostBlobs(t, recB.Target) {
			if !heldB[blob.Digest] {
				t.Errorf("b.tar's lease lacks %s %s", blob.MediaType, blob.Digest)
			}
		}

		// A goes: its lease is released and its records unpinned.
		recA, _ := d.record(t, "e2e.local/big/a:1")
		if err := os.Remove(pathA); err != nil {
			t.Fatal(err)
		}
		if c, _ := d.wpSyncOK(t, wp, dataDir, imagesDir); c["released"] != 1 || c["unpinned"] < 1 {
			t.Errorf("sync after removing a.tar: %v", c)
		}
		if _, ok := d.leaseOf(t, pathA); ok {
			t.Fatal("a.tar's lease is still there")
		}
		// Every record of B, then every record of A, deleted; the last delete
		// is synchronous, so GC has run after both: A's own layer, in no
		// lease and no record any more, is gone.
		d.deleteImageSync(t, recB.Target.Digest)
		d.deleteImageSync(t, recA.Target.Digest)
		aOwn := a.Manifests[0].Layers[len(a.Manifests[0].Layers)-1].Digest()
		eventually(t, "GC to remove a.tar's own layer", func() bool { return !d.hasBlob(t, aOwn) })
		if !d.hasBlob(t, big.Digest()) {
			t.Errorf("GC removed the shared layer although b.tar's lease should hold it")
		}

		c, _ := d.wpSyncOK(t, wp, dataDir, imagesDir)
		if c["healed"] < 1 || c["imported"] != 0 || c["bytes0"] != 1 {
			t.Errorf("heal of b from its lease: %v", c)
		}
		d.requirePinned(t, "e2e.local/big/b:1")
		for _, blob := range d.hostBlobs(t, recB.Target) {
			if !d.hasBlob(t, blob.Digest) {
				t.Errorf("healed image lacks %s", blob.Digest)
			}
		}
	})
}

// TestSiblingDirWithLongerName: a sync of images/ judges only what is under
// images/, never a sibling whose name merely starts the same (images-old/).
func TestSiblingDirWithLongerName(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		oldDir := filepath.Join(dir, "images-old")
		dataDir := filepath.Join(dir, "data")
		x := build(t, fixture.ImageSpec{Names: []string{"e2e.local/sib/x:1"}})
		y := build(t, fixture.ImageSpec{Names: []string{"e2e.local/sib/y:1"}})
		writeDockerSave(t, filepath.Join(imagesDir, "x.tar"), x)
		oldPath := filepath.Join(oldDir, "y.tar")
		writeDockerSave(t, oldPath, y)
		if c := d.syncOK(t, dataDir, imagesDir, oldDir); c["imported"] != 2 {
			t.Fatalf("sync of both dirs: %v", c)
		}
		d.requirePinned(t, "e2e.local/sib/x:1", "e2e.local/sib/y:1")

		c := d.syncOK(t, dataDir, imagesDir)
		if c["unpinned"] != 0 || c["released"] != 0 {
			t.Errorf("a sync of images/ changed what images-old/ brought: %v", c)
		}
		d.requirePinned(t, "e2e.local/sib/x:1", "e2e.local/sib/y:1")
		l, ok := d.leaseOf(t, oldPath)
		if !ok {
			t.Fatal("images-old/y.tar's lease was released")
		}
		recY, _ := d.record(t, "e2e.local/sib/y:1")
		held := d.leaseContent(t, l)
		for _, blob := range d.hostBlobs(t, recY.Target) {
			if !held[blob.Digest] {
				t.Errorf("images-old/y.tar's lease lacks %s", blob.Digest)
			}
		}
	})
}

// TestRenamedImageNeverLosesItsPin: an archive replaced by one holding the
// same image under another name. The new names are pinned before the old
// ones are unpinned: at no point does the image have no pinned name (the CRI
// reports an image pinned when any of its names carries the pin).
func TestRenamedImageNeverLosesItsPin(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	spec := fixture.ImageSpec{Names: []string{"e2e.local/mv/old:1"}, Layers: fixture.UniformLayers(2, 64<<10, false, 515)}
	old := build(t, spec)
	spec.Names = []string{"e2e.local/mv/new:1"}
	renamed := build(t, spec)
	if old.ID() != renamed.ID() {
		t.Fatal("the renamed image is not the same image")
	}
	path := filepath.Join(imagesDir, "app.tar")
	writeDockerSave(t, path, old)
	d.syncOK(t, dataDir, imagesDir)
	rec, _ := d.record(t, "e2e.local/mv/old:1")
	pinned := map[string]bool{}
	for _, n := range d.recordNames(t) {
		if strings.HasPrefix(n, "e2e.local/mv/") {
			cri, _ := d.pinnedBy(t, n)
			pinned[n] = cri
		}
	}
	if !pinned["e2e.local/mv/old:1"] {
		t.Fatalf("old:1 is not pinned: %v", pinned)
	}

	w := watchImages(t, d, rec.Target)
	writeDockerSave(t, path, renamed)
	if c := d.syncOK(t, dataDir, imagesDir); c["imported"] != 1 || c["unpinned"] < 1 || c["released"] != 1 {
		t.Errorf("sync of the renamed image: %v", c)
	}
	for _, e := range w.flush(t) {
		if !strings.HasPrefix(e.Name, "e2e.local/mv/") {
			continue
		}
		pinned[e.Name] = e.Kind != "delete" && e.Labels["io.cri-containerd.pinned"] == "pinned"
		some := false
		for _, p := range pinned {
			some = some || p
		}
		if !some {
			t.Errorf("after %s of %s no name of the image is pinned: %v", e.Kind, e.Name, pinned)
		}
	}
	d.requirePinned(t, "e2e.local/mv/new:1")
	if cri, hf := d.pinnedBy(t, "e2e.local/mv/old:1"); cri || hf {
		t.Errorf("old:1 still pinned: %v %v", cri, hf)
	}
}

// TestTamperedLayerRefused: a layer whose bytes do not match the digest its
// archive names it by is refused, in an uncompressed (seekable) archive and a
// compressed (streamed) one: the sync fails naming the file, and no record,
// lease or blob of the tampered content is left.
func TestTamperedLayerRefused(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	good := build(t, fixture.ImageSpec{Names: []string{"e2e.local/tamper/good:1"}})
	writeDockerSave(t, filepath.Join(imagesDir, "good.tar"), good)
	type tamperedArchive struct {
		path    string
		name    string
		swapped digest.Digest // the tampered layer's real digest
	}
	var bad []tamperedArchive
	for i, c := range []fixture.Compression{fixture.None, fixture.Gzip} {
		im := build(t, fixture.ImageSpec{Names: []string{fmt.Sprintf("e2e.local/tamper/bad%d:1", i)},
			Layers: fixture.UniformLayers(2, 256<<10, false, int64(900+i))})
		layer := im.Manifests[0].Layers[1]
		var buf bytes.Buffer
		if err := fixture.WriteOCI(context.Background(), &buf, fixture.OCIOptions{Names: fixture.NameContainerd}, im); err != nil {
			t.Fatal(err)
		}
		tampered, swapped := gapTamper(t, buf.Bytes(), "blobs/sha256/"+layer.Digest().Encoded())
		path := filepath.Join(imagesDir, fmt.Sprintf("bad%d.tar%s", i, c.Extension()))
		writeArchive(t, path, c, fixture.CompressOptions{}, func(_ context.Context, w io.Writer) error {
			_, err := w.Write(tampered)
			return err
		})
		bad = append(bad, tamperedArchive{path, im.Names[0], swapped})
	}
	res := d.sync(t, dataDir, imagesDir)
	if res.Code != 1 {
		t.Fatalf("sync exited %d, want 1\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
	}
	for _, b := range bad {
		named := false
		for _, line := range strings.Split(res.Stderr, "\n") {
			named = named || strings.HasPrefix(line, "error: import "+b.path+":") && strings.Contains(line, "digest")
		}
		if !named {
			t.Errorf("no error names %s and the digest:\n%s", b.path, res.Stderr)
		}
		if d.hasBlob(t, b.swapped) {
			t.Errorf("%s: the tampered bytes are in the store as %s", b.path, b.swapped)
		}
		if rec, ok := d.record(t, b.name); ok {
			t.Errorf("%s: a record was made: %s", b.path, rec.Target.Digest)
		}
		if _, ok := d.leaseOf(t, b.path); ok {
			t.Errorf("%s: a lease was left", b.path)
		}
	}
	d.requirePinned(t, "e2e.local/tamper/good:1")
	if refs := d.ingests(t); len(refs) != 0 {
		t.Errorf("ingests left: %v", refs)
	}
}

// gapTamper rewrites an uncompressed tar with the entry name's bytes changed
// (same size), and returns the digest of the changed bytes.
func gapTamper(t *testing.T, archive []byte, name string) ([]byte, digest.Digest) {
	t.Helper()
	var out bytes.Buffer
	tr, tw := tar.NewReader(bytes.NewReader(archive)), tar.NewWriter(&out)
	var swapped digest.Digest
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Name == name {
			data[len(data)/2] ^= 0xff
			swapped = digest.FromBytes(data)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if swapped == "" {
		t.Fatalf("no entry %s in the archive", name)
	}
	return out.Bytes(), swapped
}

// gapFreeze stops the agent's process (SIGSTOP) and waits until it is
// stopped, so that the test can change the store with nothing reacting; the
// agent resumes with gapThaw, or when the test ends.
func gapFreeze(t *testing.T, a *agentProc) {
	t.Helper()
	pid := a.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	eventually(t, "the agent to stop", func() bool { return gapProcState(t, pid) == "T" })
}

// gapThaw resumes an agent gapFreeze stopped.
func gapThaw(t *testing.T, a *agentProc) {
	t.Helper()
	if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// gapProcState is the state letter of a process (R, S, T, ...).
func gapProcState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ...: comm may hold spaces, so read after the last ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) == 0 {
		t.Fatalf("reading the state of pid %d: %q", pid, s)
	}
	return f[0]
}

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/leases"
	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// holdfastStdin runs holdfast with args, stdin read from r.
func holdfastStdin(t *testing.T, r io.Reader, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, holdfastBin, args...)
	cmd.Stdin = r
	return runHoldfast(t, cmd)
}

// pipeHoldfast runs `holdfast from...` with its standard output piped into
// `holdfast to...`, both real processes, and returns what each printed.
func pipeHoldfast(t *testing.T, from, to []string) (result, result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	src := exec.CommandContext(ctx, holdfastBin, from...)
	var srcErr bytes.Buffer
	src.Stdout, src.Stderr, src.Env = pw, &srcErr, append(os.Environ(), "HOLDFAST_LOG_FORMAT=json")
	if err := src.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	dst := exec.CommandContext(ctx, holdfastBin, to...)
	dst.Stdin = pr
	res := runHoldfast(t, dst)
	pr.Close()
	first := result{Stderr: srcErr.String()}
	if err := src.Wait(); err != nil {
		first.Code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			first.Code = ee.ExitCode()
		}
	}
	return first, res
}

// stdinLeases are the kept leases whose source is standard input.
func (d *daemon) stdinLeases(t *testing.T) []leases.Lease {
	t.Helper()
	var out []leases.Lease
	for _, l := range d.holdfastLeases(t) {
		if strings.HasPrefix(l.Labels["io.holdfast.source"], "kept:stdin@") {
			out = append(out, l)
		}
	}
	return out
}

// leaseImages is the content a lease holds but its state blob.
func (d *daemon) leaseImages(t *testing.T, l leases.Lease) map[digest.Digest]bool {
	t.Helper()
	held := d.leaseContent(t, l)
	for dg := range held {
		info, err := d.Client.ContentStore().Info(d.ctx(), dg)
		if err == nil && info.Labels["io.holdfast.state"] != "" {
			delete(held, dg)
		}
	}
	return held
}

// TestImportStdin: `holdfast export -o - | holdfast import -` between two
// containerds, each command a real process and the archive never a file. The
// stream is a kept source like a file: its images at the exported digests,
// pinned, its content on one kept lease (the same blobs a file import of the
// same bytes holds), listed by status under a name release takes. The same
// bytes again are the same kept source; a stream cut in half fails naming
// standard input and leaves nothing; a pipe given as a path is refused,
// pointing at "-".
func TestImportStdin(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	src := startEmbedded(t)
	dir := tempDir(t)
	one := build(t, fixture.ImageSpec{Names: []string{"e2e.local/stdin/one:1"}, Layers: fixture.UniformLayers(2, 3<<20, false, 81)})
	two := build(t, fixture.ImageSpec{Names: []string{"e2e.local/stdin/two:1"}, Layers: fixture.UniformLayers(1, 1<<20, true, 82)})
	in := filepath.Join(dir, "in.tar.gz")
	writeArchive(t, in, fixture.Gzip, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerd}, one, two)
	})
	srcData := filepath.Join(dir, "src-data")
	if res := holdfast(t, "import", "--address", src.Address, "--data-dir", srcData, in); res.Code != 0 {
		t.Fatalf("import %s exited %d\n%s\n%s", in, res.Code, res.Stdout, res.Stderr)
	}
	want := map[string]digest.Digest{}
	for _, n := range src.recordNames(t) {
		if strings.HasPrefix(n, "e2e.local/stdin/") {
			rec, _ := src.record(t, n)
			want[n] = rec.Target.Digest
		}
	}
	if len(want) != 4 {
		t.Fatalf("the source containerd holds %v; want two images with their digest names", want)
	}
	exportArgs := []string{"export", "--address", src.Address, "--data-dir", srcData, "e2e.local/stdin/*", "-o", "-"}
	exported := holdfast(t, exportArgs...)
	if exported.Code != 0 {
		t.Fatalf("export exited %d\n%s", exported.Code, exported.Stderr)
	}
	archive := []byte(exported.Stdout)
	sum := digest.FromBytes(archive)
	name := "stdin@sha256:" + sum.Encoded()[:12]

	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dataDir := filepath.Join(tempDir(t), "data")
		importArgs := []string{"import", "--address", d.Address, "--data-dir", dataDir, "-"}
		exp, imp := pipeHoldfast(t, exportArgs, importArgs)
		if exp.Code != 0 || imp.Code != 0 {
			t.Fatalf("export exited %d (%s), import - exited %d\nstdout:\n%s\nstderr:\n%s", exp.Code, exp.Stderr, imp.Code, imp.Stdout, imp.Stderr)
		}
		if !strings.Contains(imp.Stdout, name+": imported and kept, 4 images") {
			t.Errorf("import - does not report %s imported and kept:\n%s", name, imp.Stdout)
		}
		for n, dg := range want {
			rec, ok := d.record(t, n)
			if !ok || rec.Target.Digest != dg {
				t.Errorf("%s: record %v at %s; want %s", n, ok, rec.Target.Digest, dg)
			}
			d.requirePinned(t, n)
		}
		kept := d.stdinLeases(t)
		if len(kept) != 1 || kept[0].Labels["io.holdfast.kept"] != "true" || kept[0].Labels["io.holdfast.identity"] != sum.String() {
			t.Fatalf("kept leases of standard input: %v; want one, identity %s", kept, sum)
		}
		if n := len(d.holdfastLeases(t)); n != 1 {
			t.Errorf("%d holdfast leases after import -, want 1: %v", n, d.holdfastLeases(t))
		}
		// The same bytes as a file: the same blobs on its lease.
		file := filepath.Join(tempDir(t), "node.tar.zst")
		if err := os.WriteFile(file, archive, 0o644); err != nil {
			t.Fatal(err)
		}
		d.keepImportOK(t, dataDir, file)
		fileLease, ok := d.keepLeaseOf(t, file)
		if !ok {
			t.Fatal("no kept lease for the file import")
		}
		got, wantHeld := d.leaseImages(t, kept[0]), d.leaseImages(t, fileLease)
		if len(wantHeld) == 0 || len(got) != len(wantHeld) {
			t.Errorf("the stream's lease holds %d blobs, the file's %d", len(got), len(wantHeld))
		}
		for dg := range wantHeld {
			if !got[dg] {
				t.Errorf("the stream's lease does not hold %s", dg)
			}
		}
		if out := d.keepImportOK(t, dataDir, file); !strings.Contains(out, "unchanged") {
			t.Errorf("the file again: %s", out)
		}
		if res := holdfast(t, "release", "--address", d.Address, "--data-dir", dataDir, file); res.Code != 0 {
			t.Fatalf("release %s exited %d\n%s", file, res.Code, res.Stderr)
		}

		// The same bytes again, through /dev/stdin: the same kept source,
		// unchanged.
		again := holdfastStdin(t, bytes.NewReader(archive), append(importArgs[:len(importArgs)-1:len(importArgs)-1], "/dev/stdin")...)
		if again.Code != 0 || !strings.Contains(again.Stdout, name+": unchanged, 4 images kept (lease "+kept[0].ID+")") {
			t.Errorf("the same stream again exited %d:\n%s\n%s", again.Code, again.Stdout, again.Stderr)
		}
		if n := len(d.holdfastLeases(t)); n != 1 {
			t.Errorf("%d holdfast leases after the same stream again, want 1: %v", n, d.holdfastLeases(t))
		}

		// Status lists it by its name; release takes that name.
		st := keepReadStatus(t, "--address", d.Address, "--data-dir", dataDir)
		listed := false
		for _, s := range st.Sources {
			listed = listed || (s.Path == name && s.Kept && s.Images == 4 && s.Lease == kept[0].ID)
		}
		if !listed {
			b, _ := json.Marshal(st)
			t.Errorf("status lists no kept source %s: %s", name, b)
		}
		rel := holdfast(t, "release", "--address", d.Address, "--data-dir", dataDir, name)
		if rel.Code != 0 || !strings.Contains(rel.Stdout, "released "+name) {
			t.Fatalf("release %s exited %d\n%s\n%s", name, rel.Code, rel.Stdout, rel.Stderr)
		}
		for n := range want {
			d.keepRequireUnpinned(t, n)
		}
		if l := d.holdfastLeases(t); len(l) != 0 {
			t.Errorf("leases left after release: %v", l)
		}

		// Cut in half: an error naming standard input, and nothing left.
		for n := range want {
			if err := d.Client.ImageService().Delete(d.ctx(), n); err != nil {
				t.Fatal(err)
			}
		}
		cut := holdfastStdin(t, bytes.NewReader(archive[:len(archive)/2]), importArgs...)
		if cut.Code != 1 || !strings.Contains(cut.Stderr, "error: import standard input: ") {
			t.Errorf("a cut stream exited %d, want 1 and an error naming standard input:\n%s\n%s", cut.Code, cut.Stdout, cut.Stderr)
		}
		for n := range want {
			if _, ok := d.record(t, n); ok {
				t.Errorf("a cut stream made record %s", n)
			}
		}
		if l := d.holdfastLeases(t); len(l) != 0 {
			t.Errorf("a cut stream left leases: %v", l)
		}
		if refs := d.ingests(t); len(refs) != 0 {
			t.Errorf("a cut stream left ingests: %v", refs)
		}

		// A pipe named by a path is refused, pointing at "-".
		fifo := filepath.Join(tempDir(t), "fifo")
		if err := exec.Command("mkfifo", fifo).Run(); err != nil {
			t.Fatal(err)
		}
		res := d.keepImport(t, dataDir, fifo)
		if res.Code != 1 || !strings.Contains(res.Stderr, fifo) || !strings.Contains(res.Stderr, "give - and connect the pipe to standard input") {
			t.Errorf("import of a named pipe exited %d, want 1 naming it and pointing at import -:\n%s", res.Code, res.Stderr)
		}
	})
}

// TestVerifyStdin: `holdfast verify -` with a signed archive piped in gives
// the verdicts and the exit status verify of the file gives.
func TestVerifyStdin(t *testing.T) {
	t.Parallel()
	s := writeSignedScene(t, tempDir(t))
	pol := s.writePolicy(t, "enforce")
	file := holdfast(t, "verify", "-o", "json", "--policy", pol, s.archive)
	data, err := os.ReadFile(s.archive)
	if err != nil {
		t.Fatal(err)
	}
	stream := holdfastStdin(t, bytes.NewReader(data), "verify", "-o", "json", "--policy", pol, "-")
	if stream.Code != file.Code || file.Code != 1 {
		t.Errorf("verify - exited %d, verify of the file %d (want 1 for both)\n%s", stream.Code, file.Code, stream.Stderr)
	}
	type verdict struct{ Path, Name, Digest, State, By, Reason string }
	read := func(out string) []verdict {
		var doc struct{ Images []verdict }
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("verify -o json printed %q: %v", out, err)
		}
		return doc.Images
	}
	fromFile, fromStream := read(file.Stdout), read(stream.Stdout)
	if len(fromFile) != 3 || len(fromStream) != len(fromFile) {
		t.Fatalf("verify of the file lists %d images, verify - %d; want 3 each\n%s", len(fromFile), len(fromStream), stream.Stderr)
	}
	for i := range fromFile {
		f, s := fromFile[i], fromStream[i]
		if s.Path != "-" {
			t.Errorf("verify - gives path %q, want -", s.Path)
		}
		f.Path, s.Path = "", ""
		if f != s {
			t.Errorf("verify -: %+v; verify of the file: %+v", s, f)
		}
	}
	// /dev/stdin is read as - is.
	dev := holdfastStdin(t, bytes.NewReader(data), "verify", "-o", "json", "--policy", pol, "/dev/stdin")
	if dev.Code != file.Code || dev.Stdout != stream.Stdout {
		t.Errorf("verify /dev/stdin exited %d and printed\n%s\nverify - exited %d and printed\n%s", dev.Code, dev.Stdout, stream.Code, stream.Stdout)
	}
	cut := holdfastStdin(t, bytes.NewReader(data[:len(data)/2]), "verify", "--policy", pol, "-")
	if cut.Code != 1 || !strings.Contains(cut.Stderr, "error: verify standard input: ") {
		t.Errorf("verify of a cut stream exited %d, want 1 and an error naming standard input:\n%s", cut.Code, cut.Stderr)
	}
}

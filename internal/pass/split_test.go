package pass

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/fixture"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/testenv/testimage"
)

// archiveBytes is a small real .tar.zst holding one image named name.
func archiveBytes(t *testing.T, name string) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "whole.tar")
	testimage.Archive(t, path, name)
	tarball, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fixture.CompressBytes(fixture.Zstd, fixture.CompressOptions{}, tarball)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// splitInto cuts b into n parts at partName(1), partName(2), ..., each an
// hour old, and returns their paths.
func splitInto(t *testing.T, b []byte, n int, partName func(int) string) []string {
	t.Helper()
	past := time.Now().Add(-time.Hour)
	size := (len(b) + n - 1) / n
	var paths []string
	for i := 1; len(b) > 0; i++ {
		k := min(size, len(b))
		p := partName(i)
		if err := os.WriteFile(p, b[:k], 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, past, past); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
		b = b[k:]
	}
	return paths
}

// haulParts writes b as Hauler writes a haul cut in n: path.001, .002, ...
func haulParts(t *testing.T, b []byte, n int, path string) []string {
	return splitInto(t, b, n, func(i int) string { return fmt.Sprintf("%s.%03d", path, i) })
}

// zarfParts writes b as Zarf splits a package in n: path.part001, ...,
// then path.part000 with the sum sum (of b when empty); it returns every
// path, part000 first.
func zarfParts(t *testing.T, b []byte, n int, path, sum string) []string {
	t.Helper()
	data := splitInto(t, b, n, func(i int) string { return fmt.Sprintf("%s.part%03d", path, i) })
	if sum == "" {
		sum = fmt.Sprintf("%x", sha256.Sum256(b))
	}
	meta, err := json.Marshal(map[string]any{"Sha256Sum": sum, "Bytes": len(b), "Count": len(data)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".part000", meta, 0o644); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	os.Chtimes(path+".part000", past, past)
	return append([]string{path + ".part000"}, data...)
}

func allLeases(t *testing.T, rt *fake.Runtime) []hfruntime.SourceState {
	t.Helper()
	sts, err := rt.Sources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return sts
}

// TestSplitArchivesImportAsOneSource: a haul cut in three and a Zarf
// package cut in two, in an images dir, are imported as two sources named
// as the archives joined; their images are pinned, each has one lease, the
// progress hook is given each whole archive, and a second pass finds both
// unchanged.
func TestSplitArchivesImportAsOneSource(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	haulBytes, zarfBytes := archiveBytes(t, "example.com/haul/app:1"), archiveBytes(t, "example.com/zarf/app:1")
	haul := filepath.Join(dir, "haul.tar.zst")
	zarf := filepath.Join(dir, "zarf-package-app-amd64.tar.zst")
	haulParts(t, haulBytes, 3, haul)
	zarfParts(t, zarfBytes, 2, zarf, "")
	seen := &progressSeen{paths: map[string]int64{}, read: map[string]int{}, closed: map[string]bool{}}
	hook := func(path string, size int64, r io.ReadCloser) io.ReadCloser {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		seen.paths[path] = size
		return &progressCounter{r: r, path: path, seen: seen}
	}
	rt := fake.New()
	cfg := Config{ImageDirs: []string{dir}, Progress: hook}
	if sum := Sync(context.Background(), rt, cfg); sum.Imported != 2 || sum.Failed != 0 {
		t.Fatalf("first pass: %s; failures %v", sum, sum.Failures)
	}
	for _, name := range []string{"example.com/haul/app:1", "example.com/zarf/app:1"} {
		if !pinnedIn(rt, name) {
			t.Errorf("%s is not pinned", name)
		}
	}
	var sources []string
	for _, st := range allLeases(t, rt) {
		sources = append(sources, st.Source)
	}
	if len(sources) != 2 || len(leasesOf(t, rt, haul)) != 1 || len(leasesOf(t, rt, zarf)) != 1 {
		t.Errorf("leases of %v, want one of %s and one of %s", sources, haul, zarf)
	}
	if seen.paths[haul] != int64(len(haulBytes)) || seen.read[haul] != len(haulBytes) || seen.paths[zarf] != int64(len(zarfBytes)) || seen.read[zarf] != len(zarfBytes) {
		t.Errorf("progress given sizes %v, read %v; want %s: %d and %s: %d, all read", seen.paths, seen.read, haul, len(haulBytes), zarf, len(zarfBytes))
	}
	if sum := Sync(context.Background(), rt, cfg); sum.Unchanged != 2 || sum.Imported != 0 {
		t.Errorf("second pass: %s; want both unchanged", sum)
	}
}

// TestZarfSumMismatchFails: a Zarf set whose bytes are not what its
// part000 says fails, naming the archive and the sums, and nothing of it
// stays leased or pinned.
func TestZarfSumMismatchFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	zarf := filepath.Join(dir, "zarf-package-app-amd64.tar.zst")
	zarfParts(t, archiveBytes(t, "example.com/zarf/app:1"), 3, zarf, fmt.Sprintf("%x", sha256.Sum256([]byte("another"))))
	rt := fake.New()
	sum := Sync(context.Background(), rt, Config{ImageDirs: []string{dir}})
	if sum.Failed != 1 || !strings.Contains(sum.Failures[0].Error(), "import "+zarf+": ") ||
		!strings.Contains(sum.Failures[0].Error(), "its parts join to sha256") {
		t.Fatalf("%s; failures %v; want one naming %s and the sums", sum, sum.Failures, zarf)
	}
	if sts := allLeases(t, rt); len(sts) != 0 || pinnedIn(rt, "example.com/zarf/app:1") {
		t.Errorf("after the failed import: leases %+v, pinned %v", sts, pinnedIn(rt, "example.com/zarf/app:1"))
	}
}

// TestIncompleteSplitWaitsThenFails: a split archive missing a middle part
// is left to settle, even with parts of an old mtime (copied with cp -p),
// then fails naming the archive and the part, without being opened; nothing
// of it is leased. The part arriving is a change: the next pass imports it.
func TestIncompleteSplitWaitsThenFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := archiveBytes(t, "example.com/haul/app:1")
	haul := filepath.Join(dir, "haul.tar.zst")
	parts := haulParts(t, b, 3, haul)
	middle, err := os.ReadFile(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(parts[1])
	rt := fake.New()
	var imports atomic.Int32
	rt.OnImport = func(hfruntime.ImportRequest) error { imports.Add(1); return nil }
	now := time.Now()
	p := New(rt, Config{ImageDirs: []string{dir}, Settle: 10 * time.Second}, WithClock(func() time.Time { return now }))
	opts := Options{Settle: true, Memo: true}

	sum, res := p.Run(context.Background(), opts)
	if sum.Failed != 0 || len(res.Settling) != 1 || res.Settling[0] != haul || imports.Load() != 0 {
		t.Fatalf("first sight: %s %v, settling %v, %d imports; want %s settling, nothing read", sum, sum.Failures, res.Settling, imports.Load(), haul)
	}
	now = now.Add(10 * time.Second)
	sum, res = p.Run(context.Background(), opts)
	want := "import " + haul + ": split into 2 parts, and part haul.tar.zst.002 of 3 is missing (its images are unpinned as for a deleted archive)"
	if sum.Failed != 1 || sum.Failures[0].Error() != want || len(res.Settling) != 0 {
		t.Fatalf("settled: %s %v, settling %v; want the failure %q", sum, sum.Failures, res.Settling, want)
	}
	if imports.Load() != 0 || len(allLeases(t, rt)) != 0 || pinnedIn(rt, "example.com/haul/app:1") {
		t.Errorf("the incomplete archive: %d imports started, leases %+v, pinned %v; want none", imports.Load(), allLeases(t, rt), pinnedIn(rt, "example.com/haul/app:1"))
	}
	if f := p.failing(sum.Failures); len(f) != 1 || f[0].Source != haul {
		t.Errorf("failing %+v, want %s", f, haul)
	}

	if err := os.WriteFile(parts[1], middle, 0o644); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	os.Chtimes(parts[1], past, past)
	if sum, _ := p.Run(context.Background(), opts); sum.Imported != 1 || sum.Failed != 0 || !pinnedIn(rt, "example.com/haul/app:1") {
		t.Errorf("with the part back: %s %v", sum, sum.Failures)
	}
}

// TestRemovingAPartChangesTheSource: removing a part of a split archive in
// an images dir is removing the archive: the pass fails it naming the part,
// and unpins and releases what it had as for a deleted archive; with the
// part back, the archive is imported and pinned again.
func TestRemovingAPartChangesTheSource(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	haul := filepath.Join(dir, "haul.tar.zst")
	parts := haulParts(t, archiveBytes(t, "example.com/haul/app:1"), 3, haul)
	rt := fake.New()
	cfg := Config{ImageDirs: []string{dir}}
	if sum := Sync(context.Background(), rt, cfg); sum.Imported != 1 {
		t.Fatalf("first pass: %s %v", sum, sum.Failures)
	}
	middle, err := os.ReadFile(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(parts[1])
	sum := Sync(context.Background(), rt, cfg)
	if sum.Unchanged != 0 || sum.Failed != 1 || !strings.Contains(sum.Failures[0].Error(), "part haul.tar.zst.002 of 3 is missing") {
		t.Errorf("a part removed: %s %v; want a failure naming it", sum, sum.Failures)
	}
	if sum.Released != 1 || pinnedIn(rt, "example.com/haul/app:1") || len(leasesOf(t, rt, haul)) != 0 {
		t.Errorf("a part removed: %s; pinned %v, leases %v; want it unpinned and released", sum, pinnedIn(rt, "example.com/haul/app:1"), leasesOf(t, rt, haul))
	}
	if err := os.WriteFile(parts[1], middle, 0o644); err != nil {
		t.Fatal(err)
	}
	if sum := Sync(context.Background(), rt, cfg); sum.Imported != 1 || !pinnedIn(rt, "example.com/haul/app:1") {
		t.Errorf("the part back: %s %v; pinned %v", sum, sum.Failures, pinnedIn(rt, "example.com/haul/app:1"))
	}
}

// TestKeepSplitArchive: holdfast import given one part of a split archive,
// or the archive's name, imports the whole set as one kept source; given a
// set missing a part, it fails naming the part and leases nothing.
func TestKeepSplitArchive(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	zarf := filepath.Join(dir, "zarf-package-app-amd64.tar.zst")
	parts := zarfParts(t, archiveBytes(t, "example.com/zarf/app:1"), 3, zarf, "")
	rt := fake.New()
	k, err := Keep(context.Background(), rt, parts[2], Standing{}, KeepOptions{})
	if err != nil || k.Path != zarf || k.Result.Unchanged || !pinnedIn(rt, "example.com/zarf/app:1") {
		t.Fatalf("Keep(%s): %+v, %v; want %s imported and pinned", parts[2], k, err, zarf)
	}
	if k, err := Keep(context.Background(), rt, zarf, Standing{}, KeepOptions{}); err != nil || !k.Result.Unchanged {
		t.Errorf("Keep(%s) again, by its name: %+v, %v; want it unchanged", zarf, k, err)
	}

	other := filepath.Join(t.TempDir(), "haul.tar.zst")
	hparts := haulParts(t, archiveBytes(t, "example.com/haul/app:1"), 3, other)
	os.Remove(hparts[1])
	before := len(allLeases(t, rt))
	want := "import " + other + ": split into 2 parts, and part haul.tar.zst.002 of 3 is missing"
	if _, err := Keep(context.Background(), rt, hparts[2], Standing{}, KeepOptions{}); err == nil || err.Error() != want {
		t.Errorf("Keep of a set missing a part: %v, want %q", err, want)
	}
	if n := len(allLeases(t, rt)); n != before || pinnedIn(rt, "example.com/haul/app:1") {
		t.Errorf("%d leases after a failed Keep, want %d; pinned %v", n, before, pinnedIn(rt, "example.com/haul/app:1"))
	}
}

// TestSpoolRemovesEveryPart: a split archive in a spool dir is imported as
// one kept source, then every part of it, part000 too, is removed.
func TestSpoolRemovesEveryPart(t *testing.T) {
	t.Parallel()
	spool := t.TempDir()
	zarf := filepath.Join(spool, "zarf-package-app-amd64.tar.zst")
	parts := zarfParts(t, archiveBytes(t, "example.com/zarf/app:1"), 3, zarf, "")
	rt := fake.New()
	sum := Sync(context.Background(), rt, Config{SpoolDirs: []string{spool}})
	if sum.Failed != 0 || len(sum.Spooled) != 1 || sum.Spooled[0] != zarf || !pinnedIn(rt, "example.com/zarf/app:1") {
		t.Fatalf("%s %v; spooled %v", sum, sum.Failures, sum.Spooled)
	}
	for _, p := range parts {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left in the spool dir (%v)", p, err)
		}
	}
}

// TestSplitPartSwappedForFIFO: a later part replaced by a named pipe after
// the scan fails the import when it is reached, instead of hanging the pass.
func TestSplitPartSwappedForFIFO(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	parts := haulParts(t, archiveBytes(t, "example.com/haul/app:1"), 3, filepath.Join(dir, "haul.tar.zst"))
	rt := fake.New()
	rt.OnImport = func(hfruntime.ImportRequest) error {
		if err := os.Remove(parts[2]); err != nil {
			return err
		}
		return syscall.Mkfifo(parts[2], 0o644)
	}
	sum := Sync(context.Background(), rt, Config{ImageDirs: []string{dir}})
	if sum.Failed != 1 || !strings.Contains(sum.Failures[0].Error(), "not a regular file") || !strings.Contains(sum.Failures[0].Error(), parts[2]) {
		t.Errorf("a part swapped for a named pipe: %s %v", sum, sum.Failures)
	}
}

// TestDryRunSaysWhatABundleSkips: the dry run's import of a haul says its
// format and counts the entries it would leave out.
func TestDryRunSaysWhatABundleSkips(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var tarball bytes.Buffer
	if err := fixture.WriteHaul(context.Background(), &tarball, fixture.HaulOptions{Signatures: true,
		Charts: []fixture.HaulChart{{Name: "podinfo", Version: "6.5.0"}}}, testimage.Build(t, "example.com/haul/app:1")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "haul.tar"), tarball.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	actions, sum := DryRun(context.Background(), fake.New(), Config{ImageDirs: []string{dir}})
	i := slices.IndexFunc(actions, func(a Action) bool { return a.Action == "import" })
	if sum.Failed != 0 || i < 0 || actions[i].Format != "hauler-haul" ||
		!maps.Equal(actions[i].Skipped, map[string]int{"signature": 1, "attestation": 1, "chart": 1}) {
		t.Errorf("dry run of a haul: %+v (%v)", actions, sum.Failures)
	}
}

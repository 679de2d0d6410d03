package e2e

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/files"
	"github.com/opencontainers/go-digest"
)

// wpPaths are the write paths the import scenarios run on; every holdfast
// command of those scenarios names its path, so that the scenarios mean the
// same whatever the default is.
var wpPaths = []string{"stream", "direct"}

// forEachDaemonAndPath runs fn on the embedded containerd and on Debian's
// 1.6, each with every write path, each pair on a containerd of its own, in
// subtests named <daemon>/<path> (embedded/stream, debian-1.6/direct, …).
func forEachDaemonAndPath(t *testing.T, fn func(t *testing.T, d *daemon, wp string)) {
	t.Helper()
	forLinesAndPaths(t, fullLines, fn)
}

// forEachLineAndPath is forEachDaemonAndPath on every line of the matrix.
func forEachLineAndPath(t *testing.T, fn func(t *testing.T, d *daemon, wp string)) {
	t.Helper()
	forLinesAndPaths(t, matrixLines(), fn)
}

func forLinesAndPaths(t *testing.T, lines []line, fn func(t *testing.T, d *daemon, wp string)) {
	t.Helper()
	for _, c := range lines {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for _, wp := range wpPaths {
				t.Run(wp, func(t *testing.T) {
					t.Parallel()
					fn(t, c.start(t), wp)
				})
			}
		})
	}
}

// wpFlag is the --write-path flag of wp.
func wpFlag(wp string) string { return "--write-path=" + wp }

// wpSync runs `holdfast sync` against d with write path wp, logging at
// debug level (the log says which blobs were written directly).
func (d *daemon) wpSync(t *testing.T, wp, dataDir string, imageDirs ...string) result {
	t.Helper()
	args := []string{"sync", "--address", d.Address, "--data-dir", dataDir, wpFlag(wp), "--log-level=debug"}
	for _, dir := range imageDirs {
		args = append(args, "--images", dir)
	}
	return holdfast(t, args...)
}

// wpSyncOK is syncOK on write path wp; it also returns the sync's stderr.
func (d *daemon) wpSyncOK(t *testing.T, wp, dataDir string, imageDirs ...string) (map[string]int, string) {
	t.Helper()
	res := d.wpSync(t, wp, dataDir, imageDirs...)
	if res.Code != 0 {
		t.Fatalf("sync (%s) exited %d\nstdout:\n%s\nstderr:\n%s", wpFlag(wp), res.Code, res.Stdout, res.Stderr)
	}
	return countsOf(t, res), res.Stderr
}

// wpImportOK runs `holdfast import` of paths against d with write path wp,
// logging at debug level, and fails the test unless it exits 0; it returns
// the command's stdout and stderr.
func (d *daemon) wpImportOK(t *testing.T, wp, dataDir string, paths ...string) (stdout, stderr string) {
	t.Helper()
	args := append([]string{"import", "--address", d.Address, "--data-dir", dataDir, wpFlag(wp), "--log-level=debug"}, paths...)
	res := holdfast(t, args...)
	if res.Code != 0 {
		t.Fatalf("import (%s) exited %d\nstdout:\n%s\nstderr:\n%s", wpFlag(wp), res.Code, res.Stdout, res.Stderr)
	}
	return res.Stdout, res.Stderr
}

// countsOf reads a sync's summary counts as syncOK does.
func countsOf(t *testing.T, res result) map[string]int {
	t.Helper()
	c := summaryCounts(t, res.Stdout)
	c["bytes0"] = 0
	if strings.Contains(res.Stdout, " 0 B read") {
		c["bytes0"] = 1
	}
	return c
}

// wpRequirePlaced checks, from a debug log of a pass on write path wp, how
// the sources imported by that pass wrote their blobs: on the direct path,
// each of paths had blobs written directly into the content store; on the
// stream path, no source had any.
func wpRequirePlaced(t *testing.T, wp, log string, paths ...string) {
	t.Helper()
	wpRequirePlacedCounts(t, wp, directPlaced(t, log), paths...)
}

// wpRequirePlacedCounts is wpRequirePlaced on counts (directPlaced's) summed
// over passes.
func wpRequirePlacedCounts(t *testing.T, wp string, placed map[string]int, paths ...string) {
	t.Helper()
	switch wp {
	case "direct":
		for _, p := range paths {
			if placed[p] == 0 {
				t.Errorf("%s: no blob was written directly on %s", p, wpFlag(wp))
			}
		}
	default:
		for p, n := range placed {
			t.Errorf("%s: %d blobs written directly on %s", p, n, wpFlag(wp))
		}
	}
}

// wpRequireStoreClean checks d's content store directory after a pass: no
// temp file is left in holdfast-tmp, every file under blobs/sha256 holds
// the bytes its name says, and every one is a blob the store committed (a
// file the store does not know must be gone once its GC has run: polled).
// A file in reported (nil: none) was reported by an earlier check and is not
// again; the files this check reports are added to it.
func wpRequireStoreClean(t *testing.T, d *daemon, reported map[string]bool) {
	t.Helper()
	root := directContentRoot(t, d)
	left, err := os.ReadDir(filepath.Join(root, "holdfast-tmp"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("temp file left: %s", filepath.Join(root, "holdfast-tmp", e.Name()))
	}
	blobs := filepath.Join(root, "blobs", "sha256")
	blobNames := func() []string {
		es, err := os.ReadDir(blobs)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		return names
	}
	for _, name := range blobNames() {
		p := filepath.Join(blobs, name)
		got, err := files.SHA256(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // collected meanwhile
		}
		if err != nil {
			t.Errorf("reading %s: %v", p, err)
			continue
		}
		if got != name {
			t.Errorf("%s holds bytes of digest sha256:%s", p, got)
		}
	}
	uncommitted := func() []string {
		var out []string
		for _, name := range blobNames() {
			if reported[name] {
				continue
			}
			dg := digest.NewDigestFromEncoded(digest.SHA256, name)
			if dg.Validate() == nil && d.hasBlob(t, dg) {
				continue
			}
			if _, err := os.Stat(filepath.Join(blobs, name)); err == nil {
				out = append(out, name)
			}
		}
		return out
	}
	deadline := time.Now().Add(30 * time.Second)
	for left := uncommitted(); len(left) > 0; left = uncommitted() {
		if time.Now().After(deadline) {
			t.Errorf("files under %s the store did not commit, still there after 30s: %v", blobs, left)
			for _, name := range left {
				if reported != nil {
					reported[name] = true
				}
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

package registries

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// alphabet is a hosts.toml for each of a.example … z.example.
func alphabet() map[string]string {
	files := map[string]string{}
	for c := 'a'; c <= 'z'; c++ {
		files[string(c)+".example"] = Marker + "test; " + string(c) + "\n"
	}
	return files
}

// hostsFilesIn lists the registry dirs under dir that hold a hosts.toml.
func hostsFilesIn(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*", "hosts.toml"))
	if err != nil {
		t.Fatal(err)
	}
	var regs []string
	for _, p := range m {
		regs = append(regs, filepath.Base(filepath.Dir(p)))
	}
	slices.Sort(regs)
	return regs
}

// writeFile writes data to path, making its directory.
func writeFile(t *testing.T, path string, data []byte, perm os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, perm); err != nil {
		t.Fatal(err)
	}
}

// sameBytes fails the test when path no longer holds want.
func sameBytes(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("reading %s again: %v", path, err)
	} else if !bytes.Equal(got, want) {
		t.Errorf("%s is now %q, want %q", path, got, want)
	}
}

// TestWriteOperatorFileKept: a registry whose hosts.toml the operator wrote
// (no Marker) is kept as it is and reported skipped; every other registry
// is written, the same set on every run.
func TestWriteOperatorFileKept(t *testing.T) {
	t.Parallel()
	operators := []byte("server = \"https://m.example\"\n")
	want := slices.Sorted(func(yield func(string) bool) {
		for reg := range alphabet() {
			if reg != "m.example" && !yield(reg) {
				return
			}
		}
	})
	for i := range 10 {
		dir := t.TempDir()
		own := filepath.Join(dir, "m.example", "hosts.toml")
		writeFile(t, own, operators, 0o644)
		res, err := Write(dir, alphabet(), WriteOptions{})
		if err != nil {
			t.Errorf("run %d: %v", i, err)
		}
		if !slices.Equal(res.Skipped, []string{"m.example"}) {
			t.Errorf("run %d: skipped %q, want m.example alone", i, res.Skipped)
		}
		others := slices.DeleteFunc(hostsFilesIn(t, dir), func(r string) bool { return r == "m.example" })
		if !slices.Equal(others, want) {
			t.Errorf("run %d: wrote %q, want %q", i, others, want)
		}
		sameBytes(t, own, operators)
	}
}

// TestWriteRefusalLeavesNothing: a refusal is decided before anything is
// written: a registry dir that is a symlink stops the whole write, and no
// other registry's file is written, on every run.
func TestWriteRefusalLeavesNothing(t *testing.T) {
	t.Parallel()
	for i := range 10 {
		dir, elsewhere := t.TempDir(), t.TempDir()
		if err := os.Symlink(elsewhere, filepath.Join(dir, "m.example")); err != nil {
			t.Fatal(err)
		}
		_, err := Write(dir, alphabet(), WriteOptions{})
		if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "m.example")) || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("run %d: %v; want a refusal naming %s as a symlink", i, err, filepath.Join(dir, "m.example"))
		}
		if got := hostsFilesIn(t, dir); len(got) != 0 {
			t.Errorf("run %d: the refused write left hosts.toml files for %q", i, got)
		}
		if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
			t.Errorf("run %d: written through the symlink into %s: %v", i, elsewhere, entries)
		}
	}
}

// TestWriteNeverThroughLinks: a hosts.toml.tmp or a hosts.toml that is a
// symlink is never written through: the file it names keeps its bytes. A
// linked hosts.toml is not holdfast's (it writes none), so it is kept and its
// registry skipped; a stale registry that is a link is not removed from.
func TestWriteNeverThroughLinks(t *testing.T) {
	t.Parallel()
	dir, elsewhere := t.TempDir(), t.TempDir()
	secret := filepath.Join(elsewhere, "secret")
	secretBytes := []byte("root only\n")
	writeFile(t, secret, secretBytes, 0o600)
	marked := filepath.Join(elsewhere, "stale", "hosts.toml")
	markedBytes := []byte(Marker + "an earlier run\n")
	writeFile(t, marked, markedBytes, 0o644)

	if err := os.MkdirAll(filepath.Join(dir, "ghcr.io"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "ghcr.io", "hosts.toml.tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "docker.io"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(marked, filepath.Join(dir, "docker.io", "hosts.toml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(marked), filepath.Join(dir, "stale.example")); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"ghcr.io": Marker + "test; ghcr\n", "docker.io": Marker + "test; docker\n"}
	res, err := Write(dir, files, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sameBytes(t, secret, secretBytes)
	sameBytes(t, marked, markedBytes)
	if fi, err := os.Lstat(filepath.Join(dir, "docker.io", "hosts.toml")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("docker.io's linked hosts.toml: %v %v; want it kept as it is", fi, err)
	}
	if !slices.Equal(res.Skipped, []string{"docker.io"}) {
		t.Errorf("skipped %q, want docker.io", res.Skipped)
	}
	ghcr := filepath.Join(dir, "ghcr.io", "hosts.toml")
	if fi, err := os.Lstat(ghcr); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("ghcr.io's hosts.toml: %v %v; want a file", fi, err)
	}
	sameBytes(t, ghcr, []byte(files["ghcr.io"]))
	if _, err := os.Lstat(filepath.Join(dir, "stale.example")); err != nil {
		t.Errorf("the linked stale registry: %v", err)
	}
}

// TestWriteChecksDirs: Check judges the hosts dir and every registry dir
// written into or removed from before anything is written; a refusal leaves
// everything as it was.
func TestWriteChecksDirs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stale := filepath.Join(dir, "old.example", "hosts.toml")
	staleBytes := []byte(Marker + "an earlier run\n")
	writeFile(t, stale, staleBytes, 0o644)
	writeFile(t, filepath.Join(dir, "theirs.example", "hosts.toml"), []byte("server = \"https://theirs.example\"\n"), 0o644)
	var judged []string
	refuse := filepath.Join(dir, "old.example")
	opts := WriteOptions{Check: func(p string) error {
		judged = append(judged, p)
		if p == refuse {
			return fmt.Errorf("registry config %s is writable by others", p)
		}
		return nil
	}}
	files := map[string]string{"a.example": Marker + "a\n", "theirs.example": Marker + "t\n"}
	if _, err := Write(dir, files, opts); err == nil || !strings.Contains(err.Error(), refuse) {
		t.Errorf("Write: %v; want the check's refusal of %s", err, refuse)
	}
	sameBytes(t, stale, staleBytes)
	if got := hostsFilesIn(t, dir); !slices.Equal(got, []string{"old.example", "theirs.example"}) {
		t.Errorf("after the refusal: hosts.toml files of %q", got)
	}
	for _, want := range []string{dir, refuse} {
		if !slices.Contains(judged, want) {
			t.Errorf("judged %q; want %s among them", judged, want)
		}
	}
}

package source

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// TestScanConfigMapVolume: a dir laid out as the kubelet projects a ConfigMap
// volume yields its keys, read through their top-level symlinks and named
// there; the "..data" link and the timestamped dirs are not read; the marker
// key, a symlink to a file, counts; the atomic swap of "..data" changes the
// identity of a key whose content changed.
func TestScanConfigMapVolume(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "cluster")
	files := map[string][]byte{
		"cluster.pins": []byte("example.com/a:1\n"),
		"mirror.txt":   []byte("example.com/b:1\n"),
		Marker:         []byte("holdfast images dir\n"),
	}
	if err := fixture.ConfigMapDir(dir, files); err != nil {
		t.Fatal(err)
	}
	res := Scan([]string{dir})
	if len(res.Errors) != 0 || len(res.Unreadable) != 0 {
		t.Fatalf("errors %v, unreadable %v", res.Errors, res.Unreadable)
	}
	if len(res.Unmarked) != 0 {
		t.Errorf("unmarked %v: the marker key (a symlink to a file) must count", res.Unmarked)
	}
	byName := map[string]Source{}
	for _, s := range res.Sources {
		byName[s.Path] = s
	}
	pins, list := filepath.Join(dir, "cluster.pins"), filepath.Join(dir, "mirror.txt")
	if len(res.Sources) != 2 || byName[pins].Kind != PinList || byName[list].Kind != PullList {
		t.Fatalf("sources %+v; want %s (pin list) and %s (pull list), named at the top", res.Sources, pins, list)
	}
	pl, err := ReadPinList(pins)
	if err != nil || len(pl.Patterns) != 1 {
		t.Fatalf("reading the pin list through its symlink: %+v, %v", pl, err)
	}
	// The identity is the file's, not the symlink's: the symlink never changes.
	target, err := os.Stat(pins)
	if err != nil {
		t.Fatal(err)
	}
	if byName[pins].Size != target.Size() {
		t.Errorf("size %d; want the file's %d", byName[pins].Size, target.Size())
	}

	files["cluster.pins"] = []byte("example.com/c:1\n") // same size
	if err := fixture.ConfigMapDir(dir, files); err != nil {
		t.Fatal(err)
	}
	again := Scan([]string{dir})
	if len(again.Errors) != 0 || len(again.Sources) != 2 {
		t.Fatalf("after the swap: sources %+v, errors %v", again.Sources, again.Errors)
	}
	for _, s := range again.Sources {
		switch s.Path {
		case pins:
			if s.Identity == byName[pins].Identity {
				t.Errorf("%s: identity %s unchanged by the swap", pins, s.Identity)
			}
		case list:
			// Rewritten into the new dir as well: a new file, a new identity
			// (the pull list is read again; harmless).
		default:
			t.Errorf("unexpected source %s", s.Path)
		}
	}
	entries, _ := os.ReadDir(dir)
	var dotdirs []string
	for _, e := range entries {
		if e.IsDir() {
			dotdirs = append(dotdirs, e.Name())
		}
	}
	if len(dotdirs) != 1 {
		t.Errorf("the fixture left %v; want one timestamped dir", dotdirs)
	}
	for _, sk := range again.Skipped {
		if !slices.Contains([]string{"..data", dotdirs[0], Marker}, filepath.Base(sk.Path)) {
			t.Errorf("skipped %s (%s)", sk.Path, sk.Reason)
		}
	}
}

// TestScanSymlinkedArchive: an archive symlinked into an images dir (as K3s
// users do) is a source named by the link, identified by the file.
func TestScanSymlinkedArchive(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store, images := filepath.Join(dir, "store"), filepath.Join(dir, "images")
	write(t, filepath.Join(store, "app.tar"), tarBytes(t))
	if err := os.MkdirAll(images, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(images, "app.tar")
	if err := os.Symlink(filepath.Join(store, "app.tar"), link); err != nil {
		t.Fatal(err)
	}
	res := Scan([]string{images})
	if len(res.Errors) != 0 || len(res.Sources) != 1 || res.Sources[0].Path != link || res.Sources[0].Kind != Archive {
		t.Fatalf("sources %+v errors %v; want the archive named %s", res.Sources, res.Errors, link)
	}
	first := res.Sources[0].Identity
	// The file replaced behind the unchanged link: a new identity.
	write(t, filepath.Join(store, "new.tmp"), tarBytes(t))
	if err := os.Rename(filepath.Join(store, "new.tmp"), filepath.Join(store, "app.tar")); err != nil {
		t.Fatal(err)
	}
	if again := Scan([]string{images}).Sources[0].Identity; again == first {
		t.Errorf("identity %s unchanged after the file behind the link was replaced", again)
	}
}

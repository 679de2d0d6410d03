package source_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/source"
)

func localPins(dataDir string) source.PinFile {
	return source.PinFile{Path: filepath.Join(dataDir, "pins", "local.pins"), DataDir: dataDir}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// patterns is the content of the pin list without comments and blanks.
func patterns(t *testing.T, f source.PinFile) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(readFile(t, f.Path), "\n") {
		if c := source.ListContent(l); c != "" {
			out = append(out, c)
		}
	}
	return out
}

// TestPinFileAddRemove: Add appends what is new and says where what is
// already listed is, in any spelling; Remove removes every line of a pattern
// and names what no line had. The data dir is made private.
func TestPinFileAddRemove(t *testing.T) {
	t.Parallel()
	dd := filepath.Join(t.TempDir(), "data") // does not exist yet
	f := localPins(dd)
	ctx := context.Background()

	done, err := f.Add(ctx, []string{"nginx", "registry.example.com/team/*"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []source.Pinned{{Pattern: "nginx"}, {Pattern: "registry.example.com/team/*"}}; !reflect.DeepEqual(done, want) {
		t.Errorf("Add: %+v, want %+v", done, want)
	}
	if got := strings.Join(patterns(t, f), ","); got != "nginx,registry.example.com/team/*" {
		t.Errorf("patterns %q", got)
	}
	if fi, err := os.Stat(dd); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir: %v, %v; want made 0700", fi.Mode().Perm(), err)
	}

	// Again, in another spelling of the same pattern: nothing changes.
	before := readFile(t, f.Path)
	done, err = f.Add(ctx, []string{"docker.io/library/nginx", "nginx"})
	if err != nil {
		t.Fatal(err)
	}
	want := []source.Pinned{{Pattern: "docker.io/library/nginx", Line: 3, Listed: "nginx"}, {Pattern: "nginx", Line: 3, Listed: "nginx"}}
	if !reflect.DeepEqual(done, want) {
		t.Errorf("Add again: %+v, want %+v", done, want)
	}
	if after := readFile(t, f.Path); after != before {
		t.Errorf("Add of a pinned pattern changed the file:\n%s\nto\n%s", before, after)
	}

	// Remove by another spelling removes the line.
	gone, err := f.Remove(ctx, []string{"index.docker.io/library/nginx"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (source.Unpinned{Removed: []string{"nginx"}}); !reflect.DeepEqual(gone, want) {
		t.Errorf("Remove: %+v, want %+v", gone, want)
	}
	if got := strings.Join(patterns(t, f), ","); got != "registry.example.com/team/*" {
		t.Errorf("patterns after Remove %q", got)
	}

	// A pattern not listed is missing; the others still go.
	gone, err = f.Remove(ctx, []string{"nginx", "registry.example.com/team/*"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (source.Unpinned{Removed: []string{"registry.example.com/team/*"}, Missing: []string{"nginx"}}); !reflect.DeepEqual(gone, want) {
		t.Errorf("Remove of a missing pattern: %+v, want %+v", gone, want)
	}
	if got := patterns(t, f); len(got) != 0 {
		t.Errorf("patterns left: %q", got)
	}
}

// TestPinFileBadPattern: a bad pattern refuses the whole edit, naming it,
// and nothing is written.
func TestPinFileBadPattern(t *testing.T) {
	t.Parallel()
	f := localPins(t.TempDir())
	for _, pats := range [][]string{{"nginx", "ngi*nx"}, {"Nginx"}, {""}, {"*"}} {
		_, err := f.Add(context.Background(), pats)
		var bad *source.PatternsError
		if !errors.As(err, &bad) || !strings.Contains(err.Error(), "invalid pattern") {
			t.Errorf("Add %q: %v", pats, err)
		}
	}
	_, err := f.Remove(context.Background(), []string{"nginx", "*nginx"})
	var bad *source.PatternsError
	if !errors.As(err, &bad) {
		t.Errorf("Remove of a bad pattern: %v", err)
	}
	if _, err := os.Stat(f.Path); !os.IsNotExist(err) {
		t.Errorf("a bad pattern wrote the file: %v", err)
	}
}

// TestPinFileKeepsComments: lines an edit keeps come back byte for byte,
// comments and order stay, the mode is kept and no temp file is left.
func TestPinFileKeepsComments(t *testing.T) {
	t.Parallel()
	f := localPins(t.TempDir())
	original := "# our pins\n" +
		"\n" +
		"nginx   # web\n" +
		"# redis goes next\n" +
		"redis:7\n" +
		"not a pattern\n" +
		"*ingress*\n"
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Path, []byte(original), 0o640); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := f.Add(ctx, []string{"busybox:1.36"}); err != nil {
		t.Fatal(err)
	}
	if got, want := readFile(t, f.Path), original+"busybox:1.36\n"; got != want {
		t.Errorf("after Add:\n%s\nwant:\n%s", got, want)
	}
	if gone, err := f.Remove(ctx, []string{"docker.io/library/redis:7", "nginx"}); err != nil || len(gone.Missing) != 0 {
		t.Fatalf("Remove: %+v, %v", gone, err)
	}
	want := "# our pins\n" +
		"\n" +
		"# redis goes next\n" +
		"not a pattern\n" +
		"*ingress*\n" +
		"busybox:1.36\n"
	if got := readFile(t, f.Path); got != want {
		t.Errorf("after Remove:\n%s\nwant:\n%s", got, want)
	}
	fi, err := os.Stat(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640 kept", fi.Mode().Perm())
	}
	ents, _ := os.ReadDir(filepath.Dir(f.Path))
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// TestPinFileRemoveMissing: removing from a list that does not exist
// creates no file.
func TestPinFileRemoveMissing(t *testing.T) {
	t.Parallel()
	f := localPins(t.TempDir())
	gone, err := f.Remove(context.Background(), []string{"nginx"})
	if err != nil || !reflect.DeepEqual(gone, source.Unpinned{Missing: []string{"nginx"}}) {
		t.Errorf("Remove without a list: %+v, %v", gone, err)
	}
	if _, err := os.Stat(f.Path); !os.IsNotExist(err) {
		t.Errorf("Remove created the file: %v", err)
	}
}

// TestPinFileConcurrent: edits at once lose none of one another's.
func TestPinFileConcurrent(t *testing.T) {
	t.Parallel()
	f := localPins(t.TempDir())
	const workers, each = 2, 20
	var wg sync.WaitGroup
	errs := make(chan string, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				p := fmt.Sprintf("registry.example.com/w%d/app%d", w, i)
				if _, err := f.Add(context.Background(), []string{p}); err != nil {
					errs <- fmt.Sprintf("Add %s: %v", p, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	got := map[string]bool{}
	for _, l := range patterns(t, f) {
		if got[l] {
			t.Errorf("%s listed twice", l)
		}
		got[l] = true
	}
	for w := range workers {
		for i := range each {
			if p := fmt.Sprintf("registry.example.com/w%d/app%d", w, i); !got[p] {
				t.Errorf("lost %s", p)
			}
		}
	}
	if len(got) != workers*each {
		t.Errorf("%d patterns, want %d", len(got), workers*each)
	}
}

// TestPinFileWaitsForLock: an edit waits for the list's lock until its
// context ends, naming the lock file.
func TestPinFileWaitsForLock(t *testing.T) {
	t.Parallel()
	f := localPins(t.TempDir())
	ctx := context.Background()
	if _, err := f.Add(ctx, []string{"nginx"}); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(filepath.Dir(f.Path), ".local.pins.lock")
	lf, err := os.Open(lock)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := f.Add(short, []string{"redis"}); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for "+lock) {
		t.Errorf("Add while the lock is held: %v", err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Add(ctx, []string{"redis"}); err != nil {
		t.Errorf("Add once the lock is free: %v", err)
	}
}

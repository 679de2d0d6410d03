package watch

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

// names lists the paths one event reports.
func names(ev []string) []string { return ev }

// expectNamed reads events until one names path, and fails if an event until
// then names one of ignored. Events arrive in the order of the changes, so a
// change that must be ignored, made before the change to path, is a barrier:
// had it been reported, it would be reported first.
func expectNamed(t *testing.T, w *Watcher, path string, ignored ...string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-w.Events():
			for _, n := range names(ev) {
				if slices.Contains(ignored, n) {
					t.Fatalf("event %q names %s, which must be ignored", ev, n)
				}
			}
			if slices.Contains(names(ev), path) {
				return
			}
		case <-deadline:
			t.Fatalf("no event naming %s", path)
		}
	}
}

// expectProbeReported writes probe files into dir until an event names one:
// the dir is watched again (it was deleted, mounted over, or did not exist).
func expectProbeReported(t *testing.T, w *Watcher, dir string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		probe := filepath.Join(dir, fmt.Sprintf("probe-%d.tar", i))
		if err := os.WriteFile(probe, []byte("p"), 0o644); err != nil {
			t.Fatal(err)
		}
		wait := time.After(time.Second)
		for waiting := true; waiting; {
			select {
			case ev := <-w.Events():
				for _, n := range names(ev) {
					if strings.HasPrefix(filepath.Base(n), "probe-") {
						return
					}
				}
			case <-wait:
				waiting = false
			}
		}
	}
	t.Fatalf("no write in %s was reported: the dir is not watched", dir)
}

func startInotify(t *testing.T, dirs ...string) *Watcher {
	t.Helper()
	w, err := New(dirs, time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	if w.fs == nil {
		t.Fatal("inotify not used")
	}
	return w
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestWatcherInotify(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	images := filepath.Join(root, "images")
	sibling := filepath.Join(root, "images-old")
	mkdirs(t, images, sibling)
	w := startInotify(t, images)

	// A write in a sibling dir is not reported.
	writeFile(t, filepath.Join(sibling, "x.tar"))
	writeFile(t, filepath.Join(images, "first.tar"))
	expectNamed(t, w, filepath.Join(images, "first.tar"), filepath.Join(sibling, "x.tar"))

	// A new subdirectory is watched too.
	sub := filepath.Join(images, "team", "b")
	mkdirs(t, sub)
	expectNamed(t, w, filepath.Join(images, "team"))
	writeFile(t, filepath.Join(sub, "a.tar"))
	expectNamed(t, w, filepath.Join(sub, "a.tar"))

	// A dotfile being written says nothing; its rename into place does.
	tmp := filepath.Join(images, ".c.tar.tmp")
	writeFile(t, tmp)
	writeFile(t, filepath.Join(images, "barrier.tar"))
	expectNamed(t, w, filepath.Join(images, "barrier.tar"), tmp)
	if err := os.Rename(tmp, filepath.Join(images, "c.tar")); err != nil {
		t.Fatal(err)
	}
	expectNamed(t, w, filepath.Join(images, "c.tar"))
}

func TestWatcherPolling(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	images := filepath.Join(root, "images")
	sibling := filepath.Join(root, "images-old")
	mkdirs(t, images, sibling)
	var logs bytes.Buffer
	w, err := startWatcher([]string{images}, time.Second, slog.New(slog.NewTextHandler(&logs, nil)), true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !strings.Contains(logs.String(), "polling") {
		t.Errorf("the fallback was not reported: %q", logs.String())
	}
	// Nothing changed and a sibling changing are not reported: the first
	// event names the new source.
	if err := os.WriteFile(filepath.Join(sibling, "list.txt"), []byte("docker.io/library/busybox:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	list := filepath.Join(images, "list.txt")
	if err := os.WriteFile(list, []byte("docker.io/library/busybox:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.Events():
		if !slices.Equal(names(ev), []string{list}) {
			t.Errorf("first event %q, want one naming %s alone", ev, list)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event after a new source")
	}
}

// TestWatcherRewatches: an images dir deleted and re-created, mounted over,
// reached through a symlink, or missing at start is watched once it is there.
func TestWatcherRewatches(t *testing.T) {
	t.Parallel()
	t.Run("recreated", func(t *testing.T) {
		t.Parallel()
		images := filepath.Join(t.TempDir(), "images")
		mkdirs(t, images)
		w := startInotify(t, images)
		if err := os.RemoveAll(images); err != nil {
			t.Fatal(err)
		}
		mkdirs(t, images)
		expectProbeReported(t, w, images)
	})
	t.Run("missing at start", func(t *testing.T) {
		t.Parallel()
		parent := t.TempDir()
		images := filepath.Join(parent, "images")
		w := startInotify(t, images)
		// The parent is not watched for anything else.
		writeFile(t, filepath.Join(parent, "sibling.tar"))
		mkdirs(t, images)
		expectProbeReported(t, w, images)
	})
	t.Run("symlink", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		disk, link := filepath.Join(dir, "disk"), filepath.Join(dir, "images")
		mkdirs(t, disk)
		if err := os.Symlink(disk, link); err != nil {
			t.Fatal(err)
		}
		w := startInotify(t, link)
		expectProbeReported(t, w, disk)
	})
	t.Run("mounted over", func(t *testing.T) {
		t.Parallel()
		images := filepath.Join(t.TempDir(), "images")
		mkdirs(t, images)
		w := startInotify(t, images)
		mountTmpfs(t, images)
		expectProbeReported(t, w, images)
	})
}

// TestWatcherRefresh: a refresh (each resync) watches again a subdirectory
// whose watch was lost: here, one mounted over.
func TestWatcherRefresh(t *testing.T) {
	t.Parallel()
	images := filepath.Join(t.TempDir(), "images")
	sub := filepath.Join(images, "sub")
	mkdirs(t, sub)
	w := startInotify(t, images)
	mountTmpfs(t, sub)
	w.Refresh()
	expectProbeReported(t, w, sub)
}

// mountTmpfs mounts a tmpfs on dir until the test ends.
func mountTmpfs(t *testing.T, dir string) {
	t.Helper()
	testenv.RequireRoot(t, "mounts a tmpfs")
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mounting a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
}

package agent

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func expectEvent(t *testing.T, w *watcher, what string) {
	t.Helper()
	select {
	case <-w.Events():
	case <-time.After(10 * time.Second):
		t.Fatalf("no event after %s", what)
	}
}

func expectQuiet(t *testing.T, w *watcher, what string) {
	t.Helper()
	select {
	case ev := <-w.Events():
		t.Fatalf("event %q after %s", ev, what)
	case <-time.After(1500 * time.Millisecond):
	}
}

func TestWatcherInotify(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	images := filepath.Join(root, "images")
	sibling := filepath.Join(root, "images-old")
	for _, d := range []string{images, sibling} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w, err := newWatcher([]string{images}, time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.fs == nil {
		t.Fatal("inotify not used")
	}
	if err := os.WriteFile(filepath.Join(sibling, "x.tar"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	expectQuiet(t, w, "a write in a sibling dir")

	// A new subdirectory is watched too.
	sub := filepath.Join(images, "team", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, w, "mkdir")
	time.Sleep(300 * time.Millisecond)
	if err := os.WriteFile(filepath.Join(sub, "a.tar"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, w, "a write in a new subdirectory")

	// A dotfile being written says nothing; its rename into place does.
	tmp := filepath.Join(images, ".c.tar.tmp")
	if err := os.WriteFile(tmp, []byte("c"), 0o644); err != nil {
		t.Fatal(err)
	}
	expectQuiet(t, w, "writing a dotfile")
	if err := os.Rename(tmp, filepath.Join(images, "c.tar")); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, w, "a rename into place")
}

func TestWatcherPolling(t *testing.T) {
	t.Parallel()
	images := t.TempDir()
	var logs bytes.Buffer
	w, err := startWatcher([]string{images}, time.Second, slog.New(slog.NewTextHandler(&logs, nil)), true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !strings.Contains(logs.String(), "polling") {
		t.Errorf("the fallback was not reported: %q", logs.String())
	}
	expectQuiet(t, w, "nothing changed")
	if err := os.WriteFile(filepath.Join(images, "list.txt"), []byte("docker.io/library/busybox:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, w, "a new source")
}

// mkLayout makes an empty OCI layout dir (a source the scan finds).
func mkLayout(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), []byte(`{"schemaVersion":2,"manifests":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "index.json"), past, past); err != nil {
		t.Fatal(err)
	}
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/pass"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/testenv/testimage"
)

// TestFailedImportRetried: a source whose import failed is tried again when
// its backoff ends (5 s, then 10 s), with no change to the images dir and no
// resync, until it imports.
func TestFailedImportRetried(t *testing.T) {
	t.Parallel()
	rt := fake.New()
	dir := t.TempDir()
	want := testimage.Layout(t, filepath.Join(dir, "x"))
	var calls atomic.Int32
	rt.OnImport = func(hfruntime.ImportRequest) error {
		if calls.Add(1) <= 2 {
			return errors.New("a layer is neither in the archive nor in the store")
		}
		return nil
	}
	clock := newFakeClock()
	runFakeAgent(t, rt, dirsConfig(dir), clock)

	for i, delay := range []time.Duration{5 * time.Second, 10 * time.Second} {
		var due time.Time
		waitFor(t, fmt.Sprintf("a retry to be set after failure %d", i+1), func() bool { due = clock.next(); return !due.IsZero() })
		if wait := due.Sub(clock.Now()); wait < delay {
			t.Fatalf("retry %d set %v ahead, want at least the %v backoff", i+1, wait, delay)
		}
		if n := calls.Load(); n != int32(i+1) {
			t.Fatalf("%d imports before retry %d, want %d", n, i+1, i+1)
		}
		clock.Advance(due.Sub(clock.Now()))
	}
	waitFor(t, "x pinned after the retries", func() bool { rec, ok := rt.Record(want.Name); return ok && rec.Pinned() && rec.Owned() })
	if n := calls.Load(); n != 3 {
		t.Errorf("%d imports, want 3", n)
	}
}

// TestHealDuringFirstPass: a record deleted while the first pass is busy with
// another source, after it listed the records and before it has a wanted
// set, is healed by that pass, which lists the records again before it plans,
// not by a later one.
func TestHealDuringFirstPass(t *testing.T) {
	t.Parallel()
	rt := fake.New()
	dir := t.TempDir()
	want := testimage.Layout(t, filepath.Join(dir, "a"))
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	rt.OnImport = func(req hfruntime.ImportRequest) error {
		if filepath.Base(req.Source) == "a" {
			return nil
		}
		once.Do(func() { close(started) })
		<-release
		return errors.New("the store is busy")
	}
	// A one-shot sync leases a, so the agent's first pass imports nothing.
	if sum := pass.Sync(context.Background(), rt, pass.Config{ImageDirs: []string{dir}}); sum.Failed != 0 || sum.Imported != 1 {
		t.Fatalf("first sync: %s %v", sum, sum.Failures)
	}
	testimage.Layout(t, filepath.Join(dir, "slow"))

	// The fake clock never moves: the slow source's retry never comes.
	logs, ready := goFakeAgent(t, rt, dirsConfig(dir), newFakeClock())
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatalf("the first pass never reached the slow source\n%s", logs)
	}
	// The delete, then an event that means nothing: once the agent has
	// received the second, it has handled the delete.
	handed := rt.Handed()
	rt.Remove(want.Name)
	rt.Remove("example.com/nothing:1")
	waitFor(t, "the agent to receive the events", func() bool { return rt.Handed() >= handed+2 })
	close(release)
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		t.Fatalf("the first pass did not finish\n%s", logs)
	}
	waitFor(t, "a healed", func() bool { rec, ok := rt.Record(want.Name); return ok && rec.Pinned() && rec.Owned() })
	if n := strings.Count(logs.String(), "pass: "); n != 1 {
		t.Errorf("%d passes, want the first only\n%s", n, logs)
	}
	// The pass saw the delete before it planned: its plan heals, from a
	// listing made after the delete.
	if !strings.Contains(logs.String(), " 1 healed,") {
		t.Errorf("the pass planned with the records listed before the delete\n%s", logs)
	}
}

// TestPinPatternBringsPass: an image created after the pass that matches a
// pin list pattern is pinned from its create event; one created before it
// that matches nothing is not.
func TestPinPatternBringsPass(t *testing.T) {
	t.Parallel()
	rt := fake.New()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "keep.pins"), []byte("example.com/app*\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runFakeAgent(t, rt, dirsConfig(dir), newFakeClock())

	other, app := testimage.Stored(t, rt, "example.com/other:1"), testimage.Stored(t, rt, "example.com/app:2")
	rt.Create(hfruntime.Image{Name: other.Name, Target: other.Target})
	rt.Create(hfruntime.Image{Name: app.Name, Target: app.Target})
	waitFor(t, "app pinned", func() bool { rec, _ := rt.Record(app.Name); return rec.Pinned() && rec.Owned() })
	if rec, _ := rt.Record(other.Name); rec.Pinned() || rec.Owned() {
		t.Errorf("a name no pattern matches was pinned: %v", rec.Labels)
	}
}

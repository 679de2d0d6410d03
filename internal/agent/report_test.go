package agent

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/journal"
	"github.com/holdfast-project/holdfast/internal/report"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/testenv/testimage"
)

// writeArchive writes a small gzip OCI archive (an oci-layout file and an
// empty index) that the scan takes for an image archive.
func writeArchive(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for name, body := range map[string]string{"oci-layout": `{"imageLayoutVersion":"1.0.0"}`, "index.json": `{"schemaVersion":2,"manifests":[]}`} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []interface{ Close() error }{tw, zw, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, past, past); err != nil {
		t.Fatal(err)
	}
}

// startReportingAgent runs an agent on rt and a fake clock until the test
// ends, and returns it once its first pass is done.
func startReportingAgent(t *testing.T, rt *fake.Runtime, cfg Config, clock *fakeClock) *Agent {
	t.Helper()
	cfg.Log = slog.New(slog.DiscardHandler)
	cfg.Resync = time.Hour
	a := newAgent(rt, cfg, nil, clock)
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(ctx, func() { close(ready) })
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		t.Fatal("the first pass did not finish")
	}
	return a
}

func eventsOf(r report.Report, reason string) []report.Event {
	var out []report.Event
	for _, e := range r.Events {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// TestFailingArchiveReportedOnce: an archive whose import fails the same way
// pass after pass (its retries with backoff) is one SourceFailed event, and
// stays in the report's failing list, with its cause, also in the passes
// that skip it while it waits; a new cause is a second event. Removing the
// good source records its unpin and its release.
func TestFailingArchiveReportedOnce(t *testing.T) {
	t.Parallel()
	rt := fake.New()
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.tar.gz")
	writeArchive(t, broken)
	want := testimage.Layout(t, filepath.Join(dir, "x"))
	var brokenCalls atomic.Int32
	var cause atomic.Value
	cause.Store("unexpected EOF")
	rt.OnImport = func(req hfruntime.ImportRequest) error {
		if req.Source == broken {
			brokenCalls.Add(1)
			return errors.New(cause.Load().(string))
		}
		return nil
	}
	clock := newFakeClock()
	a := startReportingAgent(t, rt, dirsConfig(dir), clock)

	// Three retries of the broken archive, each a pass.
	for i := 1; i <= 3; i++ {
		var due time.Time
		waitFor(t, "a retry to be set", func() bool { due = clock.next(); return !due.IsZero() && brokenCalls.Load() == int32(i) })
		clock.Advance(due.Sub(clock.Now()))
	}
	waitFor(t, "the fourth import of the broken archive", func() bool { return brokenCalls.Load() == 4 })
	waitFor(t, "the fourth pass to end", func() bool { return clock.next().After(clock.Now()) })
	// A pass that skips the broken archive while it waits for its retry.
	testimage.Layout(t, filepath.Join(dir, "y"))
	waitFor(t, "a pass for y", func() bool { return a.Report(0).Sources == 3 })

	r := a.Report(0)
	failed := eventsOf(r, journal.ReasonSourceFailed)
	if len(failed) != 1 || failed[0].Type != journal.Warning || failed[0].Message != broken+": unexpected EOF" {
		t.Fatalf("SourceFailed events after 4 failed imports and a pass that skipped the archive: %+v", failed)
	}
	if !slices.Equal(r.Failing, []report.Failure{{Source: broken, Error: "unexpected EOF"}}) {
		t.Fatalf("failing: %+v", r.Failing)
	}
	if !r.Ready || r.Pinned != 2 {
		t.Fatalf("report %+v", r)
	}

	cause.Store("gzip: invalid header")
	// Its next retry: the clock moves from timer to timer (the retry's is
	// set when the loop sees the pass for y end, after the report has it)
	// until the archive is imported again.
	waitFor(t, "the fifth import of the broken archive", func() bool {
		if brokenCalls.Load() >= 5 {
			return true
		}
		if due := clock.next(); due.After(clock.Now()) {
			clock.Advance(due.Sub(clock.Now()))
		}
		return false
	})
	waitFor(t, "a SourceFailed event for the new cause", func() bool { return len(eventsOf(a.Report(0), journal.ReasonSourceFailed)) == 2 })
	if f := a.Report(0).Failing; len(f) != 1 || f[0].Error != "gzip: invalid header" {
		t.Fatalf("failing after a new cause: %+v", f)
	}

	if err := os.RemoveAll(filepath.Join(dir, "x")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "x unpinned and released", func() bool {
		r := a.Report(0)
		return len(eventsOf(r, journal.ReasonUnpinned)) == 2 && len(eventsOf(r, journal.ReasonReleased)) == 1 // x:1 and its repo@digest name
	})
	r = a.Report(0)
	if u := eventsOf(r, journal.ReasonUnpinned); !slices.ContainsFunc(u, func(e report.Event) bool {
		return strings.HasPrefix(e.Message, "unpinned "+want.Name+":") && e.Type == journal.Normal
	}) {
		t.Fatalf("Unpinned events %+v, want one for %s", u, want.Name)
	}
	if rel := eventsOf(r, journal.ReasonReleased)[0]; !strings.Contains(rel.Message, "of "+filepath.Join(dir, "x")+":") {
		t.Fatalf("Released event %+v", rel)
	}
}

// TestHealBackoffReported: a name healed again and again is one HealBackoff
// event when it enters backoff, not one per heal after; the report lists it
// while its backoff lasts, and not after.
func TestHealBackoffReported(t *testing.T) {
	t.Parallel()
	const x = "example.com/x:1"
	rt := fake.New()
	dir := t.TempDir()
	testimage.Dir(t, filepath.Join(dir, "x"), x)
	clock := newFakeClock()
	a := startReportingAgent(t, rt, dirsConfig(dir), clock)
	if r := a.Report(0); len(r.HealBackoff) != 0 || len(r.Events) != 0 {
		t.Fatalf("report before any heal: %+v", r)
	}
	for range healBurst {
		healed(t, rt, x)
	}
	r := a.Report(0)
	if ev := eventsOf(r, journal.ReasonHealBackoff); len(ev) != 1 || ev[0].Type != journal.Warning || !strings.Contains(ev[0].Message, x) {
		t.Fatalf("HealBackoff events after %d heals: %+v", healBurst, r.Events)
	}
	if !slices.Equal(r.HealBackoff, []string{x}) {
		t.Fatalf("healBackoff %v, want [%s]", r.HealBackoff, x)
	}
	// Deleted again while backing off: healed when the backoff ends, which
	// lengthens it; still the one event.
	rt.Remove(x)
	waitFor(t, "x's heal to wait", func() bool { return clock.next().After(clock.Now()) })
	clock.Advance(clock.next().Sub(clock.Now()))
	waitFor(t, "x healed after its backoff", func() bool { _, ok := rt.Record(x); return ok })
	if ev := eventsOf(a.Report(0), journal.ReasonHealBackoff); len(ev) != 1 {
		t.Fatalf("HealBackoff events after a heal in backoff: %+v", ev)
	}
	clock.Advance(time.Hour)
	if r := a.Report(0); len(r.HealBackoff) != 0 {
		t.Fatalf("healBackoff %v after the backoff ended", r.HealBackoff)
	}
}

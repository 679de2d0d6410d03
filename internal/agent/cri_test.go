package agent

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/testenv"
	"github.com/holdfast-project/holdfast/internal/testenv/testimage"
)

// criAgent runs an agent whose one source wants names, on rt and clock, until
// the test ends; ready closes when it says it is ready.
func criAgent(t *testing.T, rt *fake.Runtime, clock *fakeClock, names ...string) (*Agent, *testenv.Buffer, <-chan struct{}) {
	t.Helper()
	dir := t.TempDir()
	testimage.Dir(t, filepath.Join(dir, "x"), names...)
	logs := &testenv.Buffer{}
	cfg := dirsConfig(dir)
	cfg.Resync, cfg.Log = time.Hour, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a := newAgent(rt, cfg, nil, clock)
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(ctx, func() { close(ready) })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return a, logs, ready
}

// TestReadyWaitsForCRI: after the first pass has pinned every image, the
// agent is not ready until the CRI sees each of them; it looks again on its
// own, and is ready once the CRI has caught up.
func TestReadyWaitsForCRI(t *testing.T) {
	t.Parallel()
	const x, y = "example.com/x:1", "example.com/y:1"
	rt := fake.New()
	rt.HideFromCRI(y, true)
	clock := newFakeClock()
	a, logs, ready := criAgent(t, rt, clock, x, y)

	// The first pass pinned both, and the agent has looked at the CRI and
	// set itself a time to look again.
	waitFor(t, "both pinned, then readiness or a look at the CRI due", func() bool {
		rx, okx := rt.Record(x)
		ry, oky := rt.Record(y)
		if ok, _ := a.Ready(); ok {
			return true
		}
		return okx && oky && rx.Owned() && ry.Owned() && rt.CRIAsked() > 0 && !clock.next().IsZero()
	})
	select {
	case <-ready:
		t.Fatalf("ready while the CRI does not see %s\n%s", y, logs)
	default:
	}
	if ok, why := a.Ready(); ok || !strings.Contains(why, "CRI") || !strings.Contains(why, y) || strings.Contains(why, x) {
		t.Errorf("Ready() = %v, %q; want false, waiting for the CRI to see %s only", ok, why, y)
	}
	// Still hidden at the next look: still not ready.
	asked := rt.CRIAsked()
	clock.Advance(clock.next().Sub(clock.Now()))
	waitFor(t, "another look at the CRI", func() bool { return rt.CRIAsked() > asked && !clock.next().IsZero() })
	if ok, _ := a.Ready(); ok {
		t.Fatalf("ready while the CRI still does not see %s", y)
	}

	rt.HideFromCRI(y, false)
	clock.Advance(clock.next().Sub(clock.Now()))
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		t.Fatalf("not ready after the CRI saw every image\n%s", logs)
	}
	if ok, why := a.Ready(); !ok {
		t.Errorf("Ready() = false, %q after the CRI saw every image", why)
	}
}

// TestReadyWithoutCRI: a store with no CRI image service (another namespace,
// or containerd without its CRI plugin) does not hold readiness back, and the
// agent says so once.
func TestReadyWithoutCRI(t *testing.T) {
	t.Parallel()
	rt := fake.New()
	rt.SetNoCRI(true)
	_, logs, ready := criAgent(t, rt, newFakeClock(), "example.com/x:1")
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		t.Fatalf("not ready without a CRI\n%s", logs)
	}
	if n := strings.Count(logs.String(), "readiness does not wait for the CRI"); n != 1 {
		t.Errorf("%d notes of the missing CRI, want 1\n%s", n, logs)
	}
}

// TestReadyAfterCRIPatience: a CRI that never sees a pinned image holds
// readiness back for criPatience at most, then the agent is ready and says
// which images the CRI does not see.
func TestReadyAfterCRIPatience(t *testing.T) {
	t.Parallel()
	const x = "example.com/x:1"
	rt := fake.New()
	rt.HideFromCRI(x, true)
	clock := newFakeClock()
	a, logs, ready := criAgent(t, rt, clock, x)
	waitFor(t, "a look at the CRI due", func() bool { return rt.CRIAsked() > 0 && !clock.next().IsZero() })
	start := clock.Now()
	for clock.Now().Sub(start) < criPatience-criMaxDelay {
		asked := rt.CRIAsked()
		clock.Advance(clock.next().Sub(clock.Now()))
		waitFor(t, "another look at the CRI", func() bool { return rt.CRIAsked() > asked && !clock.next().IsZero() })
		if ok, _ := a.Ready(); ok {
			t.Fatalf("ready after %v while the CRI does not see %s", clock.Now().Sub(start), x)
		}
	}
	for {
		select {
		case <-ready:
			if !strings.Contains(logs.String(), "the CRI still does not see some pinned images") {
				t.Errorf("ready without saying the CRI does not see %s\n%s", x, logs)
			}
			return
		default:
		}
		if clock.Now().Sub(start) > criPatience+criMaxDelay {
			t.Fatalf("not ready %v after the first look at the CRI\n%s", clock.Now().Sub(start), logs)
		}
		asked := rt.CRIAsked()
		clock.Advance(clock.next().Sub(clock.Now()))
		waitFor(t, "another look at the CRI or readiness", func() bool {
			ok, _ := a.Ready()
			return ok || (rt.CRIAsked() > asked && !clock.next().IsZero())
		})
	}
}

// TestNotReadyWhileContainerdDown: a ready agent whose containerd stops
// answering is not ready, saying why, until it has reconnected.
func TestNotReadyWhileContainerdDown(t *testing.T) {
	t.Parallel()
	const x = "example.com/x:1"
	rt := fake.New()
	a, _, ready := criAgent(t, rt, newFakeClock(), x)
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		t.Fatal("not ready 20s after the start")
	}
	rt.Break()
	waitFor(t, "not ready while containerd does not answer", func() bool {
		ok, why := a.Ready()
		return !ok && strings.Contains(why, "containerd")
	})
	rt.Mend()
	waitFor(t, "ready again once containerd answers", func() bool { ok, _ := a.Ready(); return ok })
}

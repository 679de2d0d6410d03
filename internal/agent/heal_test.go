package agent

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/pass"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/testenv"
	"github.com/holdfast-project/holdfast/internal/testenv/testimage"
)

// wantOf is what a fake source wants for name.
func wantOf(name string) hfruntime.Want {
	return hfruntime.Want{Name: name, Target: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString(name), Size: 1}}
}

// runFakeAgent runs an agent on rt with the fake clock until the test ends,
// and returns its logs once its first pass is done.
func runFakeAgent(t *testing.T, rt *fake.Runtime, cfg Config, clock *fakeClock) *testenv.Buffer {
	t.Helper()
	logs, ready := goFakeAgent(t, rt, cfg, clock)
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		t.Fatalf("the first pass did not finish\n%s", logs)
	}
	return logs
}

// goFakeAgent starts an agent on rt with the fake clock, to run until the
// test ends; ready closes when its first pass is done.
func goFakeAgent(t *testing.T, rt *fake.Runtime, cfg Config, clock *fakeClock) (*testenv.Buffer, <-chan struct{}) {
	t.Helper()
	logs := &testenv.Buffer{}
	cfg.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.Resync == 0 {
		cfg.Resync = time.Hour // no pass on the timer stands in for what a test checks
	}
	a := newAgent(rt, cfg, nil, clock)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(ctx, func() { close(ready) })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return logs, ready
}

// startFakeAgent runs an agent on the fake runtime and a fake clock, with one
// source (an OCI layout dir) that wants the given names, and returns once its
// first pass is done.
func startFakeAgent(t *testing.T, names ...string) (*fake.Runtime, *fakeClock, *testenv.Buffer) {
	t.Helper()
	rt := fake.New()
	dir := t.TempDir()
	testimage.Dir(t, dir+"/x", names...)
	clock := newFakeClock()
	logs := runFakeAgent(t, rt, dirsConfig(dir), clock)
	for _, n := range names {
		if _, ok := rt.Record(n); !ok {
			t.Fatalf("the first pass did not pin %s", n)
		}
	}
	return rt, clock, logs
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// healed deletes name and waits until the agent has put it back.
func healed(t *testing.T, rt *fake.Runtime, name string) {
	t.Helper()
	rt.Remove(name)
	waitFor(t, name+" healed", func() bool { _, ok := rt.Record(name); return ok })
}

// TestHealBackoff: a record deleted again and again is healed at once
// healBurst times; the next heal waits 1 s, the one after 2 s, each done when
// the clock reaches it; another name heals at once meanwhile, as the backoff
// is per name; the fight is reported once.
func TestHealBackoff(t *testing.T) {
	t.Parallel()
	const x, y = "example.com/x:1", "example.com/y:1"
	rt, clock, logs := startFakeAgent(t, x, y)
	start := clock.Now()

	// The clock stands still: these heals are all at once.
	for i := 0; i < healBurst; i++ {
		healed(t, rt, x)
	}

	// The next delete of x waits. y, deleted after it, heals at once: the
	// agent handles events in order, so x's was decided first.
	for _, wait := range []time.Duration{time.Second, 2 * time.Second} {
		rt.Remove(x)
		healed(t, rt, y)
		if _, ok := rt.Record(x); ok {
			t.Fatalf("x healed at once after %d heals; want a wait of %v", healBurst, wait)
		}
		due := clock.next()
		if got := due.Sub(clock.Now()); got != wait {
			t.Fatalf("x's heal is due in %v, want %v", got, wait)
		}
		if n := clock.Advance(wait - time.Millisecond); n != 0 {
			t.Fatalf("%d timers fired before x's backoff ended", n)
		}
		if n := clock.Advance(time.Millisecond); n != 1 {
			t.Fatalf("%d timers fired when x's backoff ended, want 1", n)
		}
		waitFor(t, "x healed once its backoff ended", func() bool { _, ok := rt.Record(x); return ok })
	}
	if got := clock.Now().Sub(start); got != 3*time.Second {
		t.Errorf("the clock moved %v, want 3s", got)
	}
	if n := strings.Count(logs.String(), "something keeps removing a pinned image"); n != 1 {
		t.Errorf("the fight was reported %d times, want once", n)
	}
}

// TestHealIgnores: events for names no source wants, for the CRI's own
// records, and holdfast's own creates call no Pin and start no pass. An event
// after them that must heal is the barrier: once it is healed, the ones
// before have been handled.
func TestHealIgnores(t *testing.T) {
	t.Parallel()
	const x = "example.com/x:1"
	rt, _, _ := startFakeAgent(t, x)
	pins, listings := rt.Pins(), rt.Listings()

	rt.Remove("example.com/other:1")
	rt.Remove("sha256:" + digest.FromString("x").Encoded())
	rt.Emit(hfruntime.ImageEvent{Kind: hfruntime.ImageCreated, Name: x,
		Labels: map[string]string{hfruntime.LabelPinned: hfruntime.PinnedValue, hfruntime.LabelCRIPinned: hfruntime.PinnedValue}})
	rt.Create(hfruntime.Image{Name: "example.com/other:2", Target: wantOf("example.com/other:2").Target})

	healed(t, rt, x)
	if got := rt.Pins() - pins; got != 1 {
		t.Errorf("%d Pin calls, want the barrier's 1", got)
	}
	if got := rt.PinsOf(x); got < 1 {
		t.Errorf("the barrier's Pin call was not for %s", x)
	}
	if got := rt.Listings() - listings; got != 0 {
		t.Errorf("%d passes listed the records, want none", got)
	}
	if _, ok := rt.Record("example.com/other:1"); ok {
		t.Error("an unwanted name was created")
	}
	if rec, _ := rt.Record("example.com/other:2"); rec.Pinned() || rec.Owned() {
		t.Error("an unwanted name was pinned")
	}
}

// dirsConfig is a daemon's configuration with these images dirs only.
func dirsConfig(dirs ...string) Config { return Config{Config: pass.Config{ImageDirs: dirs}} }

// TestReadinessWaitsForImagesOnly: the names readiness waits for the CRI
// to see are the wanted images', not the records of their signatures
// (Want.Signs), which the CRI lists as no image.
func TestReadinessWaitsForImagesOnly(t *testing.T) {
	target := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("image"), Size: 1}
	sig := "example.com/app:sha256-" + target.Digest.Encoded() + ".sig"
	h := &healer{wanted: map[string]hfruntime.Want{
		"example.com/app:1": {Name: "example.com/app:1", Target: target},
		sig:                 {Name: sig, Target: ocispec.Descriptor{Digest: digest.FromString("sig")}, Signs: target.Digest},
	}}
	if got := h.wantedNames(); len(got) != 1 || !got["example.com/app:1"] {
		t.Errorf("readiness waits for %v, want example.com/app:1 alone", got)
	}
}

package agent

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startFakeAgent runs an agent on the fake runtime, with one source that wants x:1.
func startFakeAgent(t *testing.T) (*fake.Runtime, *syncBuffer) {
	t.Helper()
	rt := fake.New()
	dir := t.TempDir()
	want := hfruntime.Want{Name: "example.com/x:1", Target: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("x"), Size: 1}}
	// The source is an OCI layout dir in the images dir; the fake import says what it holds.
	src := dir + "/x"
	mkLayout(t, src)
	rt.ImportFunc = func(req hfruntime.ImportRequest) (hfruntime.ImportResult, error) {
		return hfruntime.ImportResult{Lease: "holdfast/x", Images: []hfruntime.Want{want}}, nil
	}
	logs := &syncBuffer{}
	a := New(rt, Config{ImageDirs: []string{dir}, Log: slog.New(slog.NewTextHandler(logs, nil))}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(ctx, nil)
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the first pass to pin x:1", func() bool { _, ok := rt.Record(want.Name); return ok })
	return rt, logs
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

// TestHealBackoff: a record deleted again and again is healed every time, the
// first few at once, then with growing waits, and the fight is reported once.
func TestHealBackoff(t *testing.T) {
	t.Parallel()
	rt, logs := startFakeAgent(t)
	const name = "example.com/x:1"
	var waits []time.Duration
	for i := 0; i < 6; i++ {
		start := time.Now()
		rt.Delete(name)
		waitFor(t, "heal", func() bool { _, ok := rt.Record(name); return ok })
		waits = append(waits, time.Since(start))
	}
	// Heals 1–4 are immediate; the 4th starts a 1 s backoff, the 5th a 2 s one.
	if waits[4] < 900*time.Millisecond || waits[5] < 1900*time.Millisecond {
		t.Errorf("no backoff: heal waits %v", waits)
	}
	if n := strings.Count(logs.String(), "something keeps removing a pinned image"); n != 1 {
		t.Errorf("the fight was reported %d times, want once", n)
	}
}

// TestHealIgnores: events for names no source wants, and for the CRI's own
// records, heal nothing.
func TestHealIgnores(t *testing.T) {
	t.Parallel()
	rt, _ := startFakeAgent(t)
	before := rt.Pins()
	rt.Delete("example.com/other:1")
	rt.Delete("sha256:" + digest.FromString("x").Encoded())
	rt.Emit(hfruntime.ImageEvent{Kind: hfruntime.ImageUpdated, Name: "example.com/x:1",
		Labels: map[string]string{hfruntime.LabelPinned: hfruntime.PinnedValue, hfruntime.LabelCRIPinned: hfruntime.PinnedValue}})
	time.Sleep(300 * time.Millisecond)
	if rt.Pins() != before {
		t.Errorf("%d pins for events that needed none", rt.Pins()-before)
	}
	if _, ok := rt.Record("example.com/other:1"); ok {
		t.Error("an unwanted name was created")
	}
}

package agent

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/pass"
	"github.com/holdfast-project/holdfast/internal/report"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/source"
	"github.com/holdfast-project/holdfast/internal/testenv/testimage"
)

// TestPullRequired: with --pull-required, a required image the node lacks
// goes on the peer list at once, the report says it is being pulled, and a
// pass pulls, pins and leases it as that list's; once no workload needs it,
// it stays for the grace period, then its line goes and the pass unpins it
// and releases the lease. An image pinned otherwise is never listed.
func TestPullRequired(t *testing.T) {
	t.Parallel()
	rt := fake.New()
	redis := testimage.Stored(t, rt, "docker.io/library/redis:7")
	app := testimage.Stored(t, rt, "registry.example.com/app:1")
	pulled := make(chan string, 4)
	release := make(chan struct{})
	rt.PullFunc = func(ref string) (hfruntime.Want, error) {
		pulled <- ref
		<-release
		if ref == redis.Name {
			return redis, nil
		}
		return hfruntime.Want{}, os.ErrNotExist
	}
	// app is pinned by hand: a pin holdfast does not own.
	rt.Create(hfruntime.Image{Name: app.Name, Target: app.Target, Labels: map[string]string{hfruntime.LabelCRIPinned: hfruntime.PinnedValue}})
	peers := filepath.Join(t.TempDir(), "peers")
	list := filepath.Join(peers, "required.txt")
	cfg := dirsConfig(t.TempDir(), peers)
	cfg.PullRequired, cfg.PeerList, cfg.PeerGrace = true, list, 10*time.Minute
	clock := newFakeClock()
	a := startReportingAgent(t, rt, cfg, clock)
	ctx := context.Background()

	set := report.RequiredSet{Images: []report.RequiredImage{{Ref: "redis:7"}, {Ref: app.Name}}}
	if err := a.SetRequired(ctx, set); err != nil {
		t.Fatal(err)
	}
	if got := listed(t, list); len(got) != 1 || got[0] != redis.Name {
		t.Fatalf("the peer list names %v, want only %s (app is pinned by hand)", got, redis.Name)
	}
	r := a.Report(0).Required
	if r.Pulling != 1 || len(r.NotReady) != 1 || !r.NotReady[0].Pulling || r.NotReady[0].State != report.Missing {
		t.Errorf("while the pull runs: %+v, want redis missing and being pulled", r)
	}
	select {
	case ref := <-pulled:
		if ref != redis.Name {
			t.Errorf("pulled %s, want %s", ref, redis.Name)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no pass pulled the peer list's image")
	}
	close(release)
	waitFor(t, "redis pinned by the peer list", func() bool {
		rec, ok := rt.Record(redis.Name)
		return ok && rec.Pinned() && len(leasesFor(t, rt, list)) == 1
	})
	waitFor(t, "the report ready", func() bool { return a.Report(0).Required.Ready })

	// No workload needs it any more: it stays for the grace period.
	if err := a.SetRequired(ctx, report.RequiredSet{}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(9 * time.Minute)
	if err := a.SetRequired(ctx, report.RequiredSet{}); err != nil {
		t.Fatal(err)
	}
	if got := listed(t, list); len(got) != 1 {
		t.Fatalf("within the grace period the peer list names %v, want redis still", got)
	}
	if rec, _ := rt.Record(redis.Name); !rec.Pinned() {
		t.Fatal("redis unpinned within the grace period")
	}
	// Then the agent's own timer drops it, and the pass lets it go.
	waitFor(t, "the peer list emptied after the grace period", func() bool {
		clock.Advance(time.Minute)
		_, err := os.Stat(list)
		return os.IsNotExist(err)
	})
	waitFor(t, "redis unpinned and its lease released", func() bool {
		rec, ok := rt.Record(redis.Name)
		return (!ok || !rec.Pinned()) && len(leasesFor(t, rt, list)) == 0
	})
	if rec, _ := rt.Record(app.Name); !rec.Pinned() {
		t.Error("app, pinned by hand, was unpinned")
	}
}

// TestPeerListReleasedWhenOff: a peer list left from a run with
// --pull-required is emptied once the grace period has passed after an
// agent without it starts, whatever the required set says.
func TestPeerListReleasedWhenOff(t *testing.T) {
	t.Parallel()
	list := filepath.Join(t.TempDir(), "required.txt")
	if err := writePeerList(list, []string{"docker.io/library/redis:7"}); err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	a := newAgent(fake.New(), Config{Config: pass.Config{PeerList: list}, PeerGrace: time.Minute}, nil, clock)
	set := &report.RequiredSet{Images: []report.RequiredImage{{Ref: "docker.io/library/redis:7"}}}
	due := a.peers.update(set, map[string]report.State{"docker.io/library/redis:7": report.Missing})
	if want := clock.Now().Add(time.Minute); !due.Equal(want) {
		t.Errorf("due %v, want %v", due, want)
	}
	if got := listed(t, list); len(got) != 1 {
		t.Fatalf("at start the list names %v, want redis kept for the grace period", got)
	}
	clock.Advance(time.Minute)
	if due := a.peers.update(nil, nil); !due.IsZero() {
		t.Errorf("due %v after the release, want none", due)
	}
	if _, err := os.Stat(list); !os.IsNotExist(err) {
		t.Errorf("the peer list after the grace period: %v, want it removed", err)
	}
}

// listed is the references of the peer list at path.
func listed(t *testing.T, path string) []string {
	t.Helper()
	refs, err := readPeerList(path)
	if err != nil {
		t.Fatal(err)
	}
	return refs
}

// leasesFor is the leases of the source at path.
func leasesFor(t *testing.T, rt *fake.Runtime, path string) []string {
	t.Helper()
	states, err := rt.Sources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, st := range states {
		if st.Source == path {
			out = append(out, st.Lease)
		}
	}
	return out
}

// TestPeerListFull: a full peer list keeps what it holds and leaves the new
// image out, saying so.
func TestPeerListFull(t *testing.T) {
	t.Parallel()
	list := filepath.Join(t.TempDir(), "required.txt")
	set := &report.RequiredSet{}
	states := map[string]report.State{}
	var held []string
	for i := range maxPeerRefs {
		ref := fmt.Sprintf("example.com/held/i:%05d", i)
		held = append(held, ref)
		set.Images = append(set.Images, report.RequiredImage{Ref: ref})
		states[ref] = report.Pinned
	}
	if err := writePeerList(list, held); err != nil {
		t.Fatal(err)
	}
	late := "example.com/a-late:1" // sorts before every held one
	set.Images = append(set.Images, report.RequiredImage{Ref: late})
	states[late] = report.Missing
	a := New(fake.New(), Config{Config: pass.Config{PeerList: list}, PeerGrace: time.Minute, PullRequired: true}, nil)
	a.peers.update(set, states)
	got := listed(t, list)
	if len(got) != maxPeerRefs || slices.Contains(got, late) || got[0] != held[0] {
		t.Errorf("the full list has %d refs (late one in: %v), want the %d it held", len(got), slices.Contains(got, late), maxPeerRefs)
	}
}

// TestPeerListUnreadableStays: a peer list that cannot be read (here: more
// lines than a list may have) is neither rewritten nor removed: what it held
// is not dropped while it cannot be read.
func TestPeerListUnreadableStays(t *testing.T) {
	t.Parallel()
	list := filepath.Join(t.TempDir(), "required.txt")
	body := []byte(strings.Repeat("#\n", source.MaxListLines) + "docker.io/library/nginx:1\n")
	if err := os.WriteFile(list, body, 0o644); err != nil {
		t.Fatal(err)
	}
	a := New(fake.New(), Config{Config: pass.Config{PeerList: list}, PeerGrace: time.Minute, PullRequired: true}, nil)
	set := &report.RequiredSet{Images: []report.RequiredImage{{Ref: "docker.io/library/redis:7"}}}
	a.peers.update(set, map[string]report.State{"docker.io/library/redis:7": report.Missing})
	if got, err := os.ReadFile(list); err != nil || !bytes.Equal(got, body) {
		t.Errorf("the unreadable peer list was rewritten (%v): %d bytes, want %d", err, len(got), len(body))
	}
}

// TestPeerListIsTheAgents: the peer list's file is a record of the agent's
// list, not an order. A line in it at start that no required set names is
// neither pulled nor pinned, though its image is in the store; a line added
// by hand while the agent runs is neither, and the agent writes its own
// list back over the file.
func TestPeerListIsTheAgents(t *testing.T) {
	t.Parallel()
	rt := fake.New()
	needed := testimage.Stored(t, rt, "example.com/needed:1")
	stale := testimage.Stored(t, rt, "example.com/stale:1")
	extra := testimage.Stored(t, rt, "example.com/extra:1")
	for _, w := range []hfruntime.Want{stale, extra} {
		rt.Create(hfruntime.Image{Name: w.Name, Target: w.Target}) // in the store, unpinned
	}
	var (
		mu     sync.Mutex
		pulled []string
	)
	rt.PullFunc = func(ref string) (hfruntime.Want, error) {
		mu.Lock()
		defer mu.Unlock()
		pulled = append(pulled, ref)
		if ref == needed.Name {
			return needed, nil
		}
		return hfruntime.Want{}, os.ErrNotExist
	}
	peers := filepath.Join(t.TempDir(), "peers")
	list := filepath.Join(peers, "required.txt")
	if err := os.MkdirAll(peers, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(list, []byte(stale.Name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := dirsConfig(t.TempDir(), peers)
	cfg.PullRequired, cfg.PeerList, cfg.PeerGrace = true, list, 10*time.Minute
	cfg.Log = slog.New(slog.DiscardHandler)
	cfg.Resync = time.Hour
	rec := &passCounter{}
	a := New(rt, cfg, rec)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the first pass", func() bool { return rec.n.Load() > 0 })
	if err := a.SetRequired(context.Background(), report.RequiredSet{Images: []report.RequiredImage{{Ref: needed.Name}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the required image pinned", func() bool {
		rec, ok := rt.Record(needed.Name)
		return ok && rec.Pinned()
	})
	want, err := os.ReadFile(list)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(list, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, extra.Name)
	f.Close()
	waitFor(t, "the agent's list written back", func() bool {
		got, err := os.ReadFile(list)
		return err == nil && bytes.Equal(got, want)
	})
	// The write-back brings on one more pass: once it is done, nothing
	// pulled or pinned either line.
	passes := rec.n.Load()
	waitFor(t, "a pass after the write-back", func() bool { return rec.n.Load() > passes })
	mu.Lock()
	defer mu.Unlock()
	for _, w := range []hfruntime.Want{stale, extra} {
		if slices.Contains(pulled, w.Name) || pinnedIn(rt, w.Name) {
			t.Errorf("%s, a line the agent did not write, pulled %v, pinned %v", w.Name, slices.Contains(pulled, w.Name), pinnedIn(rt, w.Name))
		}
	}
}

func pinnedIn(rt *fake.Runtime, name string) bool {
	rec, ok := rt.Record(name)
	return ok && rec.Pinned()
}

// passCounter counts the passes done.
type passCounter struct {
	noRecorder
	n atomic.Int32
}

func (c *passCounter) ReconcileDone(time.Duration, bool) { c.n.Add(1) }

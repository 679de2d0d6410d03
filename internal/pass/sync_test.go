package pass

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/source"
	"github.com/holdfast-project/holdfast/internal/testenv/testimage"
)

func wantAt(name, content string) hfruntime.Want {
	return hfruntime.Want{Name: name, Target: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString(content), Size: 1}}
}

func pinnedIn(rt *fake.Runtime, name string) bool {
	r, ok := rt.Record(name)
	return ok && r.Pinned() && r.Owned()
}

func leasesOf(t *testing.T, rt *fake.Runtime, path string) []string {
	t.Helper()
	sts, err := rt.Sources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, st := range sts {
		if st.Source == path {
			out = append(out, st.Lease)
		}
	}
	return out
}

// TestSettledAt: a file is complete once its mtime is the settle time old,
// or once it has stayed the same for the settle time by the daemon's clock,
// however far ahead of the clock its mtime is.
func TestSettledAt(t *testing.T) {
	t.Parallel()
	p := New(fake.New(), Config{Settle: 2 * time.Second})
	opts := Options{Settle: true}
	t0 := time.Now()
	future := source.Source{Path: "/i/p.tar", Identity: "size=1,mtime=future", MtimeNs: t0.AddDate(1, 0, 0).UnixNano()}
	if due, wait, settling := p.deferred(future, opts, t0); !wait || !settling || !due.Equal(t0.Add(2*time.Second)) {
		t.Errorf("future mtime, first seen: due %v wait %v settling %v; want settling until %v", due, wait, settling, t0.Add(2*time.Second))
	}
	if _, wait, _ := p.deferred(future, opts, t0.Add(time.Second)); !wait {
		t.Error("future mtime: complete before the settle time passed")
	}
	if _, wait, _ := p.deferred(future, opts, t0.Add(2*time.Second)); wait {
		t.Error("future mtime, unchanged for the settle time: still waiting")
	}

	// It changes: the settle time starts again from when that was seen.
	grown := future
	grown.Identity = "size=2,mtime=future"
	if due, wait, _ := p.deferred(grown, opts, t0.Add(3*time.Second)); !wait || !due.Equal(t0.Add(5*time.Second)) {
		t.Errorf("changed: due %v wait %v; want waiting until %v", due, wait, t0.Add(5*time.Second))
	}

	// An mtime in the past: the mtime rule, as before.
	old := source.Source{Path: "/i/b.tar", Identity: "size=1,mtime=old", MtimeNs: t0.Add(-time.Hour).UnixNano()}
	if _, wait, _ := p.deferred(old, opts, t0); wait {
		t.Error("a file renamed into place with an old mtime waits")
	}
	fresh := source.Source{Path: "/i/c.tar", Identity: "size=1,mtime=fresh", MtimeNs: t0.Add(-500 * time.Millisecond).UnixNano()}
	if due, wait, _ := p.deferred(fresh, opts, t0); !wait || !due.Equal(t0.Add(1500*time.Millisecond)) {
		t.Errorf("fresh mtime: due %v wait %v; want waiting until %v", due, wait, t0.Add(1500*time.Millisecond))
	}

	// Gone from the scan: forgotten.
	p.forgetUnseen([]source.Source{old})
	if _, ok := p.seen[future.Path]; ok {
		t.Error("a source no longer scanned is remembered")
	}
}

// TestPassHoldsGoneSourcesWhileOneIsWritten: an upgrade that copies the new
// archive in, then deletes the old one: while the new one is being written,
// nothing the old one wanted is unpinned and its lease stays; once the new
// one is imported, the old lease is released and only what no source wants
// is unpinned.
func TestPassHoldsGoneSourcesWhileOneIsWritten(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	v1, v2 := filepath.Join(dir, "v1"), filepath.Join(dir, "v2")
	rt := fake.New()
	h := &handed{}
	p := New(rt, Config{ImageDirs: []string{dir}, Settle: time.Hour}, WithHandoff(h))
	ctx := context.Background()
	old := testimage.Dir(t, v1, "example.com/shared:1", "example.com/old:1")
	shared, oldOnly := old[0], old[1]
	p.Run(ctx, Options{Settle: true})
	if !pinnedIn(rt, shared.Name) || !pinnedIn(rt, oldOnly.Name) {
		t.Fatal("v1's images not pinned")
	}
	v1Leases := leasesOf(t, rt, v1)

	// v2 being written (a fresh mtime, an hour's settle time), v1 deleted.
	newOnly := testimage.Dir(t, v2, "example.com/shared:1", "example.com/new:1")[1]
	now := time.Now()
	if err := os.Chtimes(filepath.Join(v2, "index.json"), now, now); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(v1); err != nil {
		t.Fatal(err)
	}
	sum, pr := p.Run(ctx, Options{Settle: true})
	if len(pr.Settling) != 1 || sum.Unpinned != 0 || sum.Released != 0 {
		t.Errorf("pass while v2 is written: settling %v, %d unpinned, %d released; want v2 settling, nothing unpinned or released",
			pr.Settling, sum.Unpinned, sum.Released)
	}
	for _, w := range []hfruntime.Want{shared, oldOnly} {
		if !pinnedIn(rt, w.Name) {
			t.Errorf("%s unpinned while v2 is written", w.Name)
		}
		if _, ok := h.wanted[w.Name]; !ok {
			t.Errorf("%s no longer healed while v2 is written", w.Name)
		}
	}
	if got := leasesOf(t, rt, v1); len(got) != 1 || got[0] != v1Leases[0] {
		t.Errorf("v1's leases %v, want %v kept", got, v1Leases)
	}

	// v2 complete.
	past := now.Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(v2, "index.json"), past, past); err != nil {
		t.Fatal(err)
	}
	sum, pr = p.Run(ctx, Options{Settle: true})
	if len(pr.Pending) != 0 || sum.Imported != 1 || sum.Released != 1 {
		t.Errorf("pass after v2 settled: pending %v, %d imported, %d released; want v2 imported, v1 released", pr.Pending, sum.Imported, sum.Released)
	}
	if !pinnedIn(rt, shared.Name) || !pinnedIn(rt, newOnly.Name) || pinnedIn(rt, oldOnly.Name) {
		t.Errorf("after the upgrade: shared %v, new %v, old %v; want shared and new pinned, old not",
			pinnedIn(rt, shared.Name), pinnedIn(rt, newOnly.Name), pinnedIn(rt, oldOnly.Name))
	}
	if got := leasesOf(t, rt, v1); len(got) != 0 {
		t.Errorf("v1's leases %v, want released", got)
	}
}

// TestPassFailedSourceHoldsNothing: a source waiting for its retry after a
// failed import holds no unpin back: it may never import.
func TestPassFailedSourceHoldsNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	v1, broken := filepath.Join(dir, "v1"), filepath.Join(dir, "broken")
	rt := fake.New()
	rt.OnImport = func(req hfruntime.ImportRequest) error {
		if req.Source == broken {
			return os.ErrInvalid
		}
		return nil
	}
	p := New(rt, Config{ImageDirs: []string{dir}, Settle: time.Hour})
	ctx := context.Background()
	x := testimage.Dir(t, v1, "example.com/x:1")[0]
	testimage.Layout(t, broken)
	p.Run(ctx, Options{Settle: true, Memo: true})
	if !pinnedIn(rt, x.Name) {
		t.Fatal("x not pinned")
	}
	if err := os.RemoveAll(v1); err != nil {
		t.Fatal(err)
	}
	sum, pr := p.Run(ctx, Options{Settle: true, Memo: true})
	if len(pr.Pending) != 1 || len(pr.Settling) != 0 {
		t.Fatalf("broken is not waiting for its retry: pending %v settling %v", pr.Pending, pr.Settling)
	}
	// x:1 and its repo@digest name.
	if sum.Unpinned != 2 || sum.Released != 1 || pinnedIn(rt, x.Name) {
		t.Errorf("v1 deleted beside a failed source: %d unpinned, %d released; want x's two names unpinned and v1 released", sum.Unpinned, sum.Released)
	}
}

// TestPullListRestoresDrift: a pull list keeps the target it leased for a
// name whose record someone re-pointed; the pass restores the record as drift
// and the list's lease stays as it was.
func TestPullListRestoresDrift(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	list := filepath.Join(dir, "list.txt")
	if err := os.WriteFile(list, []byte("example.com/x:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rt := fake.New()
	x := testimage.Stored(t, rt, "example.com/x:1")
	pulls := 0
	rt.PullFunc = func(ref string) (hfruntime.Want, error) { pulls++; return x, nil }
	ctx := context.Background()
	if sum := Sync(ctx, rt, Config{ImageDirs: []string{dir}}); sum.Failed != 0 || !pinnedIn(rt, x.Name) {
		t.Fatalf("first sync: %v %v", sum, sum.Failures)
	}
	leases := leasesOf(t, rt, list)

	if _, err := rt.Pin(ctx, wantAt(x.Name, "elsewhere")); err != nil { // ctr tag --force
		t.Fatal(err)
	}
	sum := Sync(ctx, rt, Config{ImageDirs: []string{dir}})
	if sum.Drift != 1 || sum.Released != 0 || sum.Failed != 0 {
		t.Errorf("sync after the re-point: %v %v; want 1 drift, nothing released", sum, sum.Failures)
	}
	if r, _ := rt.Record(x.Name); r.Target.Digest != x.Target.Digest {
		t.Errorf("x:1 points at %s, want the list's %s", r.Target.Digest, x.Target.Digest)
	}
	if got := leasesOf(t, rt, list); len(got) != 1 || got[0] != leases[0] {
		t.Errorf("the list's leases %v, want %v", got, leases)
	}
	if pulls != 1 {
		t.Errorf("pulled %d times, want once", pulls)
	}
}

// TestUnreadableListsKeep: a pull list and a pin list that cannot be read
// (here: symlinks to a directory, which fail for root too) keep their pins and
// leases, as an unreadable archive does.
func TestUnreadableListsKeep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pull, pins := filepath.Join(dir, "pull.txt"), filepath.Join(dir, "keep.pins")
	rt := fake.New()
	x, y := testimage.Stored(t, rt, "example.com/x:1"), testimage.Stored(t, rt, "example.com/y:1")
	rt.PullFunc = func(ref string) (hfruntime.Want, error) { return x, nil }
	ctx := context.Background()
	if _, err := rt.Pin(ctx, y); err != nil { // y is in the store, brought by something else
		t.Fatal(err)
	}
	if err := rt.Unpin(ctx, y.Name); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pull, []byte(x.Name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pins, []byte("example.com/y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{ImageDirs: []string{dir}}
	if sum := Sync(ctx, rt, cfg); sum.Failed != 0 || !pinnedIn(rt, x.Name) || !pinnedIn(rt, y.Name) {
		t.Fatalf("first sync: %v %v", sum, sum.Failures)
	}
	before := map[string][]string{pull: leasesOf(t, rt, pull), pins: leasesOf(t, rt, pins)}

	for _, p := range []string{pull, pins} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(t.TempDir(), p); err != nil {
			t.Fatal(err)
		}
	}
	sum := Sync(ctx, rt, cfg)
	if sum.Failed != 2 || sum.Unpinned != 0 || sum.Released != 0 {
		t.Errorf("sync with unreadable lists: %v %v; want 2 failed, nothing unpinned or released", sum, sum.Failures)
	}
	for _, w := range []hfruntime.Want{x, y} {
		if !pinnedIn(rt, w.Name) {
			t.Errorf("%s unpinned", w.Name)
		}
	}
	for p, want := range before {
		if got := leasesOf(t, rt, p); len(got) != 1 || got[0] != want[0] {
			t.Errorf("%s: leases %v, want %v", p, got, want)
		}
	}
}

// TestPassListsTheStoreOnce: a pass that imports an archive and leases a pin
// list and a pull list lists the records and the leases once each, and plans
// with what its imports and list leases said they wrote; so does a pass that
// finds everything unchanged. What it plans is what a pass that lists
// everything again finds: nothing left to do.
func TestPassListsTheStoreOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rt := fake.New()
	app := testimage.Dir(t, filepath.Join(dir, "app"), "example.com/app:1")[0]
	kept := testimage.Stored(t, rt, "example.com/kept:1")
	rt.Create(hfruntime.Image{Name: kept.Name, Target: kept.Target})
	pulled := testimage.Stored(t, rt, "example.com/pulled:1")
	rt.PullFunc = func(string) (hfruntime.Want, error) { return pulled, nil }
	if err := os.WriteFile(filepath.Join(dir, "keep.pins"), []byte("example.com/kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pull.txt"), []byte(pulled.Name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg := Config{ImageDirs: []string{dir}}
	for _, pass := range []string{"first", "unchanged"} {
		before := rt.Listings()
		sum := Sync(ctx, rt, cfg)
		if sum.Failed != 0 {
			t.Fatalf("%s pass: %s %v", pass, sum, sum.Failures)
		}
		if n := rt.Listings() - before; n != 2 {
			t.Errorf("%s pass listed records or leases %d times, want once each", pass, n)
		}
		for _, w := range []hfruntime.Want{app, kept, pulled} {
			if !pinnedIn(rt, w.Name) {
				t.Errorf("%s pass: %s not pinned", pass, w.Name)
			}
		}
	}
	actions, sum := DryRun(ctx, rt, cfg)
	if len(actions) != 0 || sum.Failed != 0 {
		t.Errorf("a pass after them would do %+v (%v)", actions, sum.Failures)
	}
}

// handed is a Handoff that keeps the wanted set a pass hands over.
type handed struct {
	noHandoff
	wanted map[string]hfruntime.Want
}

func (h *handed) Pinned(wanted map[string]hfruntime.Want, _ map[string]bool) { h.wanted = wanted }

package pass

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/source"
	"github.com/holdfast-project/holdfast/internal/testenv/testimage"
)

// TestEmptiedDirNeedsMarker: a pass marks an images dir that holds sources;
// once that dir is empty and unmarked (an unmounted volume) a pass keeps its
// pins and leases and fails saying how to confirm; once confirmed, it unpins
// and releases.
func TestEmptiedDirNeedsMarker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rt := fake.New()
	dir := t.TempDir()
	want := testimage.Layout(t, filepath.Join(dir, "x"))
	cfg := Config{ImageDirs: []string{dir}}
	pinned := func() bool {
		rec, ok := rt.Record(want.Name)
		return ok && rec.Labels[hfruntime.LabelPinned] == hfruntime.PinnedValue
	}
	leases := func() int { st, _ := rt.Sources(ctx); return len(st) }

	if sum := Sync(ctx, rt, cfg); sum.Failed != 0 || !pinned() {
		t.Fatalf("first pass: %v %v", sum, sum.Failures)
	}
	marker := filepath.Join(dir, source.Marker)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("an images dir holding sources was not marked: %v", err)
	}

	// The volume goes: the dir underneath is empty and unmarked.
	for _, p := range []string{marker, filepath.Join(dir, "x")} {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	sum := Sync(ctx, rt, cfg)
	if sum.Failed != 1 || !strings.Contains(sum.Failures[0].Error(), "touch "+marker) {
		t.Errorf("pass over an empty unmarked dir: %v %v, want one failure saying how to confirm", sum, sum.Failures)
	}
	if !pinned() || leases() != 1 || sum.Unpinned != 0 || sum.Released != 0 {
		t.Errorf("pass over an empty unmarked dir unpinned or released: pinned %v, leases %d, %v", pinned(), leases(), sum)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("an empty dir was marked by holdfast: only the operator may confirm it")
	}

	// Confirmed.
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sum = Sync(ctx, rt, cfg)
	if sum.Failed != 0 || pinned() || leases() != 0 {
		t.Errorf("pass after confirming: %v %v, pinned %v, leases %d", sum, sum.Failures, pinned(), leases())
	}
}

func TestUnconfirmed(t *testing.T) {
	t.Parallel()
	leases := []hfruntime.SourceState{{Source: "/a/x.tar"}, {Source: "/b/y.tar"}}
	scan := source.Result{
		Dirs:     []string{"/a", "/b", "/c", "/d"},
		Unmarked: []string{"/a", "/b", "/c"},
		Sources:  []source.Source{{Path: "/b/z.tar"}},
	}
	// /a: unmarked, empty, leased from: unknown. /b: holds a source. /c: no
	// lease under it. /d: marked.
	if got := unconfirmed(scan, leases); len(got) != 1 || got[0] != "/a" {
		t.Errorf("unconfirmed = %v, want [/a]", got)
	}
	u := unknown(scan, leases)
	for path, want := range map[string]bool{"/a/x.tar": true, "/b/y.tar": false, "/d/w.tar": false, "/e/v.tar": true} {
		if u(path) != want {
			t.Errorf("unknown(%s) = %v, want %v", path, !want, want)
		}
	}
}

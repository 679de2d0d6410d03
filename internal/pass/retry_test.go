package pass

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/testenv/testimage"
)

// The retries of a pass run in a synctest bubble: its clock is the bubble's,
// whose time moves only when every goroutine in it waits, so the seconds and
// minutes of backoff below take no real time.

// TestPullRetriesWithBackoff: a pull that fails is tried again within the
// pass, 1 s and then 2 s later; a reference that fails every try is left out
// of the passes of the next 30 s, and tried by the first pass after, which
// pins it.
func TestPullRetriesWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		rt := fake.New()
		flaky, down := testimage.Stored(t, rt, "example.com/flaky:1"), testimage.Stored(t, rt, "example.com/down:1")
		if err := os.WriteFile(filepath.Join(dir, "pull.txt"), []byte(flaky.Name+"\n"+down.Name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		var (
			mu        sync.Mutex
			tries     = map[string][]time.Duration{}
			reachable atomic.Bool
		)
		start := time.Now()
		rt.PullFunc = func(ref string) (hfruntime.Want, error) {
			mu.Lock()
			defer mu.Unlock()
			tries[ref] = append(tries[ref], time.Since(start))
			switch {
			case ref == flaky.Name && len(tries[ref]) == 3:
				return flaky, nil
			case ref == down.Name && reachable.Load():
				return down, nil
			}
			return hfruntime.Want{}, errors.New("connection reset by peer")
		}
		p := New(rt, Config{ImageDirs: []string{dir}})
		ctx := context.Background()

		sum, res := p.Run(ctx, Options{Memo: true})
		if want := []time.Duration{0, time.Second, 3 * time.Second}; !slices.Equal(tries[flaky.Name], want) {
			t.Errorf("flaky tried at %v, want %v", tries[flaky.Name], want)
		}
		if !pinnedIn(rt, flaky.Name) || pinnedIn(rt, down.Name) || sum.Failed != 1 {
			t.Fatalf("first pass: flaky pinned %v, down pinned %v; %s %v", pinnedIn(rt, flaky.Name), pinnedIn(rt, down.Name), sum, sum.Failures)
		}
		if want := start.Add(3*time.Second + 30*time.Second); !res.NextCheck.Equal(want) {
			t.Errorf("next check %v after the start, want %v", res.NextCheck.Sub(start), want.Sub(start))
		}

		reachable.Store(true)
		time.Sleep(29 * time.Second)
		p.Run(ctx, Options{Memo: true})
		if n := len(tries[down.Name]); n != 3 || pinnedIn(rt, down.Name) {
			t.Fatalf("a pass within the 30 s backoff: down tried %d times, pinned %v; want 3 tries, from the first pass only", n, pinnedIn(rt, down.Name))
		}
		time.Sleep(2 * time.Second)
		if sum, _ := p.Run(ctx, Options{Memo: true}); sum.Failed != 0 || !pinnedIn(rt, down.Name) {
			t.Errorf("the pass after the backoff: %s %v; down pinned %v", sum, sum.Failures, pinnedIn(rt, down.Name))
		}
	})
}

// TestPeerPullRetriesSooner: a reference of the peer source that fails every
// try of a pass waits 5 s, not 30, before the next pass tries it: a peer may
// hold it by then.
func TestPeerPullRetriesSooner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		rt := fake.New()
		img := testimage.Stored(t, rt, "example.com/peer:1")
		list := filepath.Join(dir, "required.txt")
		if err := os.WriteFile(list, []byte(img.Name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		var held atomic.Bool
		tries := 0
		rt.PullFunc = func(string) (hfruntime.Want, error) {
			tries++
			if held.Load() {
				return img, nil
			}
			return hfruntime.Want{}, errors.New("not found")
		}
		p := New(rt, Config{ImageDirs: []string{dir}, PeerList: list})
		start := time.Now()
		_, res := p.Run(context.Background(), Options{Memo: true})
		if want := start.Add(3*time.Second + 5*time.Second); !res.NextCheck.Equal(want) || tries != 3 {
			t.Errorf("after a pass of %d tries, next check %v after the start, want 3 tries and %v", tries, res.NextCheck.Sub(start), want.Sub(start))
		}
		held.Store(true)
		time.Sleep(6 * time.Second)
		if sum, _ := p.Run(context.Background(), Options{Memo: true}); sum.Failed != 0 || !pinnedIn(rt, img.Name) {
			t.Errorf("the pass 6 s later: %s %v; pinned %v", sum, sum.Failures, pinnedIn(rt, img.Name))
		}
	})
}

// TestFailedImportWaitsItsTurn: a source whose import failed is left out of
// the passes that skip failures (Memo) for 5 s, then 10 s, and tried again
// at once by one that does not.
func TestFailedImportWaitsItsTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		rt := fake.New()
		var tries atomic.Int32
		rt.OnImport = func(hfruntime.ImportRequest) error {
			tries.Add(1)
			return errors.New("a layer is neither in the archive nor in the store")
		}
		testimage.Layout(t, filepath.Join(dir, "x"))
		p := New(rt, Config{ImageDirs: []string{dir}})
		ctx := context.Background()
		for i, wait := range []time.Duration{5 * time.Second, 10 * time.Second} {
			_, res := p.Run(ctx, Options{Memo: true})
			if n := tries.Load(); n != int32(i+1) {
				t.Fatalf("%d imports after pass %d, want %d", n, i+1, i+1)
			}
			if got := time.Until(res.NextCheck); got != wait {
				t.Errorf("retry %d due in %v, want %v", i+1, got, wait)
			}
			time.Sleep(wait - time.Second)
			if _, res := p.Run(ctx, Options{Memo: true}); tries.Load() != int32(i+1) || len(res.Pending) != 1 {
				t.Fatalf("a pass before the retry is due: %d imports, pending %v", tries.Load(), res.Pending)
			}
			time.Sleep(time.Second)
		}
		if _, res := p.Run(ctx, Options{}); tries.Load() != 3 || len(res.Pending) != 0 {
			t.Errorf("a pass that does not skip failures: %d imports, pending %v; want it tried at once", tries.Load(), res.Pending)
		}
	})
}

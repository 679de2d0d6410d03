package pass

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/testenv/testimage"
)

// backgroundRunner is a Runner that pulls beside its passes, its pulls
// running until the test ends; pulled says when one completed.
func backgroundRunner(t *testing.T, rt hfruntime.Backend, cfg Config) (p *Runner, pulled chan struct{}) {
	pulled = make(chan struct{}, 1)
	p = New(rt, cfg, WithBackgroundPulls(func() {
		select {
		case pulled <- struct{}{}:
		default:
		}
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.RunPulls(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return p, pulled
}

// TestPullsBesideThePass: a pass whose pull list names a reference whose
// pull hangs pins the archive beside it at once, and does not wait; once
// the pull completes, the next pass pins it and leases it as the list's,
// and its temporary lease goes only after the list's own lease holds it.
func TestPullsBesideThePass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		list := filepath.Join(dir, "pull.txt")
		rt := &releaseWatcher{Runtime: fake.New(), list: list}
		slow := testimage.Stored(t, rt.Runtime, "example.com/slow:1")
		app := testimage.Dir(t, filepath.Join(dir, "app"), "example.com/app:1")[0]
		answer := make(chan struct{})
		rt.PullFunc = func(string) (hfruntime.Want, error) {
			<-answer
			return slow, nil
		}
		if err := os.WriteFile(list, []byte(slow.Name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		p, pulled := backgroundRunner(t, rt, Config{ImageDirs: []string{dir}})
		ctx := context.Background()

		sum, _ := p.Run(ctx, Options{Memo: true})
		if !pinnedIn(rt.Runtime, app.Name) || pinnedIn(rt.Runtime, slow.Name) || sum.Failed != 0 {
			t.Fatalf("the pass beside a hanging pull: app pinned %v, slow pinned %v; %s %v; want app pinned, slow not yet, nothing failed",
				pinnedIn(rt.Runtime, app.Name), pinnedIn(rt.Runtime, slow.Name), sum, sum.Failures)
		}
		close(answer)
		<-pulled
		if sum, _ := p.Run(ctx, Options{Memo: true}); sum.Failed != 0 || !pinnedIn(rt.Runtime, slow.Name) {
			t.Fatalf("the pass after the pull: %s %v; slow pinned %v", sum, sum.Failures, pinnedIn(rt.Runtime, slow.Name))
		}
		if rt.released != 1 || !rt.held {
			t.Errorf("the temporary lease was released %d times, the list's lease holding the content then: %v; want once, after it", rt.released, rt.held)
		}
	})
}

// TestBackgroundPullBackoff: a reference that keeps failing is tried by the
// puller, not by passes: at once, 1 s and 3 s later, then 5 s later for the
// peer source (30 s for a pull list), doubling; passes in between try
// nothing and report its failure once it has failed three times. A
// reference no list names any more is no longer tried.
func TestBackgroundPullBackoff(t *testing.T) {
	for _, c := range []struct {
		name  string
		peers bool
		next  time.Duration
	}{{"pull list", false, 30 * time.Second}, {"peer source", true, 5 * time.Second}} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dir := t.TempDir()
				rt := fake.New()
				list := filepath.Join(dir, "required.txt")
				ref := "example.com/down:1"
				if err := os.WriteFile(list, []byte(ref+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				var (
					mu    sync.Mutex
					tries []time.Duration
				)
				start := time.Now()
				rt.PullFunc = func(string) (hfruntime.Want, error) {
					mu.Lock()
					defer mu.Unlock()
					tries = append(tries, time.Since(start))
					return hfruntime.Want{}, errors.New("401 Unauthorized")
				}
				cfg := Config{ImageDirs: []string{dir}}
				if c.peers {
					cfg.PeerList = list
				}
				p, _ := backgroundRunner(t, rt, cfg)
				ctx := context.Background()
				for range 4 {
					p.Run(ctx, Options{Memo: true})
					time.Sleep(time.Second)
				}
				sum, _ := p.Run(ctx, Options{Memo: true})
				synctest.Wait()
				mu.Lock()
				if want := []time.Duration{0, time.Second, 3 * time.Second}; !slices.Equal(tries, want) {
					t.Errorf("tried at %v after the start, want %v, whatever the passes", tries, want)
				}
				mu.Unlock()
				if sum.Failed != 1 || p.PullFailure(ref) == nil {
					t.Errorf("a pass after three failed tries: %s %v, the failure %v; want it reported", sum, sum.Failures, p.PullFailure(ref))
				}
				time.Sleep(3*time.Second + c.next - 4*time.Second - time.Millisecond)
				synctest.Wait()
				mu.Lock()
				if len(tries) != 3 {
					t.Errorf("tried %d times before its backoff of %v ended, want 3", len(tries), c.next)
				}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				synctest.Wait()
				mu.Lock()
				if len(tries) != 4 {
					t.Errorf("tried %d times once its backoff of %v ended, want 4", len(tries), c.next)
				}
				mu.Unlock()

				// The line goes: the next pass forgets it, and it is not tried again.
				if err := os.WriteFile(list, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				p.Run(ctx, Options{})
				time.Sleep(time.Hour)
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				if len(tries) != 4 || p.PullFailure(ref) != nil {
					t.Errorf("after its line went: tried %d times, failure %v; want no more tries and none reported", len(tries), p.PullFailure(ref))
				}
			})
		})
	}
}

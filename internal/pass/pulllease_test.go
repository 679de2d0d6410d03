package pass

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/testenv/testimage"
)

// releaseWatcher notes, when a temporary lease is released, whether a lease
// of the pull list already held what was pulled.
type releaseWatcher struct {
	*fake.Runtime
	list     string
	released int
	held     bool
}

func (r *releaseWatcher) Release(ctx context.Context, lease string) error {
	if strings.HasPrefix(lease, hfruntime.LeasePrefix+"tmp") {
		r.released++
		states, _ := r.Runtime.Sources(ctx)
		for _, st := range states {
			if st.Source == r.list && st.Complete {
				r.held = true
			}
		}
	}
	return r.Runtime.Release(ctx, lease)
}

// TestPulledContentLeasedBeforeTempLeaseGoes: what a pull list pulls stays
// under its temporary lease until the list's own lease holds it; released
// before, containerd's GC may collect it in between, and the list fails
// with its manifest "neither in the archive nor in the store".
func TestPulledContentLeasedBeforeTempLeaseGoes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rt := &releaseWatcher{Runtime: fake.New(), list: filepath.Join(dir, "pull.txt")}
	pulled := testimage.Stored(t, rt.Runtime, "example.com/pulled:1")
	rt.PullFunc = func(string) (hfruntime.Want, error) { return pulled, nil }
	if err := os.WriteFile(rt.list, []byte(pulled.Name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if sum := Sync(context.Background(), rt, Config{ImageDirs: []string{dir}}); sum.Failed != 0 {
		t.Fatalf("sync: %s %v", sum, sum.Failures)
	}
	if rt.released != 1 || !rt.held {
		t.Errorf("the temporary lease was released %d times, the list's lease holding the content then: %v; want once, after it", rt.released, rt.held)
	}
}

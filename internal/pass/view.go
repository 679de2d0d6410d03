package pass

import (
	"context"
	"slices"
	"sync"

	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
)

// view is the store as a pass sees it: the leases' states and the records,
// listed once as the pass starts, with the states the pass's own imports and
// list leases wrote put in place as each is done (an import's result carries
// its state). The pass works from it throughout. It lists the store again to
// plan only when the first listing failed, or when an image event came since
// (a record may have changed under it, or another holdfast process leased a
// source and pinned its images).
type view struct {
	mu      sync.Mutex
	states  []hfruntime.SourceState
	records []hfruntime.Image
	err     error // the listing failed: what needs the store is not judged
}

// list reads the store's leases and records at once.
func list(ctx context.Context, rt hfruntime.Runtime) *view {
	var (
		v          view
		serr, rerr error
		wg         sync.WaitGroup
	)
	wg.Go(func() { v.states, serr = rt.Sources(ctx) })
	wg.Go(func() { v.records, rerr = rt.Records(ctx) })
	wg.Wait()
	if serr != nil {
		v.err = serr
	} else if rerr != nil {
		v.err = rerr
	}
	return &v
}

// put records the state a pass's import or list lease left on its lease.
func (v *view) put(st hfruntime.SourceState) {
	if st.Lease == "" {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for i := range v.states {
		if v.states[i].Lease == st.Lease {
			v.states[i] = st
			return
		}
	}
	v.states = append(v.states, st)
}

// now is the view as it stands: the states (a copy) and the records.
func (v *view) now() ([]hfruntime.SourceState, []hfruntime.Image, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.states), v.records, v.err
}

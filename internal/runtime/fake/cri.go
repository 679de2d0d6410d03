package fake

import (
	"context"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// criState is what the fake's CRI reports: by default it sees every record
// at once, and reports it pinned when it carries the CRI label.
type criState struct {
	none   bool            // no CRI at all
	hidden map[string]bool // names the CRI does not see yet
	asked  int             // CRIImages calls
}

// SetNoCRI makes the fake a store without a CRI image service.
func (r *Runtime) SetNoCRI(none bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cri.none = none
}

// HideFromCRI makes the CRI not see a name (hidden) until called again with
// false, as a CRI that has not caught up with containerd's events yet.
func (r *Runtime) HideFromCRI(name string, hidden bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cri.hidden == nil {
		r.cri.hidden = map[string]bool{}
	}
	r.cri.hidden[name] = hidden
}

// CRIAsked counts the CRIImages calls.
func (r *Runtime) CRIAsked() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cri.asked
}

func (r *Runtime) CRIImages(_ context.Context, names []string) (map[string]runtime.CRIImage, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cri.asked++
	if r.cri.none {
		return nil, runtime.ErrNoCRI
	}
	out := make(map[string]runtime.CRIImage, len(names))
	for _, n := range names {
		img, ok := r.records[n]
		if !ok || r.cri.hidden[n] {
			out[n] = runtime.CRIImage{}
			continue
		}
		out[n] = runtime.CRIImage{Seen: true, Pinned: img.Pinned()}
	}
	return out, nil
}

package fake

import (
	"maps"
	"sort"
	"time"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// Label sets one label of a record, as another writer would (ctr images
// label), and emits its event; it reports whether the record exists.
func (r *Runtime) Label(name, key, value string) bool {
	r.mu.Lock()
	img, ok := r.records[name]
	if ok {
		img.Labels = maps.Clone(img.Labels)
		if img.Labels == nil {
			img.Labels = map[string]string{}
		}
		img.Labels[key] = value
		r.records[name] = img
	}
	r.mu.Unlock()
	if ok {
		r.Emit(runtime.ImageEvent{Kind: runtime.ImageUpdated, Name: name, Labels: maps.Clone(img.Labels)})
	}
	return ok
}

// GC collects what containerd's GC would of the records at now: on a store
// that Expires, every record whose expiry (runtime.LabelExpire) has passed
// and that is not held; an expiry that does not parse is ignored, as
// containerd ignores it. It returns the names collected, sorted, each with
// its delete event sent.
func (r *Runtime) GC(now time.Time) []string {
	r.mu.Lock()
	var gone []string
	if r.Expires {
		for name, img := range r.records {
			exp, err := time.Parse(time.RFC3339, img.Labels[runtime.LabelExpire])
			if err != nil || !now.After(exp) || r.held[name] {
				continue
			}
			delete(r.records, name)
			gone = append(gone, name)
		}
	}
	r.mu.Unlock()
	sort.Strings(gone)
	for _, name := range gone {
		select {
		case r.events <- runtime.ImageEvent{Kind: runtime.ImageDeleted, Name: name}:
		default: // nobody watches
		}
	}
	return gone
}

// Held reports whether the record name is held past its expiry.
func (r *Runtime) Held(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held[name]
}

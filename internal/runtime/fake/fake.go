// Package fake is an in-memory runtime.Runtime for unit tests of pure logic:
// records with labels, source states, and a content store with leases that
// the real import (importer.Import) writes through ImportStore. It pulls
// nothing unless a test says how.
package fake

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// Runtime is the fake. The exported funcs, when set, answer pulls and hook
// into imports.
type Runtime struct {
	PullFunc func(ref string) (runtime.Want, error)
	// OnImport, when set, runs as each import starts (the store's Prepare):
	// its error fails the import before anything is read.
	OnImport func(runtime.ImportRequest) error
	// WriteDocErr, when set, fails every document the real import writes:
	// an import that breaks half-way.
	WriteDocErr error
	// Expires makes the store one whose GC collects records by their
	// expiry, as containerd 2.x does (expiry.go); without it every record
	// is kept, as on 1.x. Set it before the fake is used.
	Expires bool

	mu      sync.Mutex
	records map[string]runtime.Image
	states  map[string]runtime.SourceState
	blobs   map[digest.Digest][]byte
	leases  map[string]*fakeLease
	docs    []digest.Digest // documents the imports wrote, in order
	syncs   int             // Sync calls of the imports
	events  chan runtime.ImageEvent
	pins    map[string]int // Pin calls by name, whether they changed anything or not
	lists   int            // Records and Sources calls
	handed  int            // events the watcher's reader has received
	cri     criState
	down    bool                   // Server fails: containerd does not answer
	streams []chan error           // the open event streams' error channels
	claim   *runtime.PolicyInForce // the signature policy's claim (policy.go)
	held    map[string]bool        // records held past their expiry (Expires)
	prefers map[string][]string    // PullOptions.Prefer of each pull, by ref
}

var _ runtime.Backend = &Runtime{}

// New makes an empty fake.
func New() *Runtime {
	return &Runtime{records: map[string]runtime.Image{}, states: map[string]runtime.SourceState{},
		blobs: map[digest.Digest][]byte{}, leases: map[string]*fakeLease{}, events: make(chan runtime.ImageEvent, 64), pins: map[string]int{}, held: map[string]bool{},
		prefers: map[string][]string{}}
}

// Emit sends an image event to the watcher.
func (r *Runtime) Emit(ev runtime.ImageEvent) { r.events <- ev }

// Remove removes a record, as crictl rmi would, and emits its event.
func (r *Runtime) Remove(name string) {
	r.mu.Lock()
	delete(r.records, name)
	r.mu.Unlock()
	r.Emit(runtime.ImageEvent{Kind: runtime.ImageDeleted, Name: name})
}

// Create stores a record, as an import by hand or a pull would, and emits its event.
func (r *Runtime) Create(img runtime.Image) {
	r.mu.Lock()
	r.records[img.Name] = img
	r.mu.Unlock()
	r.Emit(runtime.ImageEvent{Kind: runtime.ImageCreated, Name: img.Name, Labels: img.Labels})
}

// Handed counts the events the watcher's reader has received. A reader that
// handles one event at a time has finished with every event before the last
// one counted.
func (r *Runtime) Handed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.handed
}

// Record returns one record: a copy, its labels its own.
func (r *Runtime) Record(name string) (runtime.Image, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	img, ok := r.records[name]
	img.Labels = maps.Clone(img.Labels)
	return img, ok
}

// PutState stores a source state as if an import had made it.
func (r *Runtime) PutState(st runtime.SourceState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st.Complete = true
	r.states[st.Lease] = st
}

// Pins counts every Pin call, whether it changed a record or not.
func (r *Runtime) Pins() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.pins {
		n += c
	}
	return n
}

// PinsOf counts every Pin call for one name.
func (r *Runtime) PinsOf(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pins[name]
}

// Listings counts the Records and Sources calls.
func (r *Runtime) Listings() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lists
}

// Break makes containerd stop answering: open event streams end with an
// error and Server fails, until Mend.
func (r *Runtime) Break() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = true
	for _, errc := range r.streams {
		errc <- errors.New("fake: containerd went away")
	}
	r.streams = nil
}

// Mend makes containerd answer again after Break.
func (r *Runtime) Mend() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = false
}

func (r *Runtime) Server(context.Context) (runtime.ServerInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		return runtime.ServerInfo{}, errors.New("fake: containerd does not answer")
	}
	return runtime.ServerInfo{Version: "fake"}, nil
}

func (r *Runtime) Pull(_ context.Context, ref string, opts runtime.PullOptions) (runtime.Want, error) {
	r.mu.Lock()
	r.prefers[ref] = append(r.prefers[ref], opts.Prefer)
	r.mu.Unlock()
	if r.PullFunc == nil {
		return runtime.Want{}, fmt.Errorf("fake: cannot pull %s", ref)
	}
	return r.PullFunc(ref)
}

// Prefers is the PullOptions.Prefer of each pull of ref so far, in order.
func (r *Runtime) Prefers(ref string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.prefers[ref])
}

func (r *Runtime) TempLease(context.Context) (string, error) { return runtime.LeasePrefix + "tmp", nil }

func (r *Runtime) Records(context.Context) ([]runtime.Image, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lists++
	out := make([]runtime.Image, 0, len(r.records))
	for _, img := range r.records {
		img.Labels = maps.Clone(img.Labels)
		out = append(out, img)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (r *Runtime) Images(ctx context.Context) ([]runtime.ImageDetail, error) {
	recs, _ := r.Records(ctx)
	out := make([]runtime.ImageDetail, 0, len(recs))
	for _, img := range recs {
		out = append(out, runtime.ImageDetail{Image: img})
	}
	return out, nil
}

func (r *Runtime) Sources(context.Context) ([]runtime.SourceState, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lists++
	out := make([]runtime.SourceState, 0, len(r.states))
	for _, st := range r.states {
		// Intact while every blob it needs is in the store, as containerd's
		// adapter reports it; Missing lists those gone.
		st.Intact, st.Missing = st.Complete, nil
		for _, d := range st.Blobs {
			if _, ok := r.blobs[d]; !ok && st.Complete {
				st.Intact = false
				st.Missing = append(st.Missing, d)
			}
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Lease < out[j].Lease })
	return out, nil
}

func (r *Runtime) Pin(_ context.Context, w runtime.Want, opts ...runtime.PinOption) (runtime.PinResult, error) {
	first := runtime.ApplyPinOptions(opts).First
	r.mu.Lock()
	defer r.mu.Unlock()
	img, ok := r.records[w.Name]
	var res runtime.PinResult
	if !ok {
		img = runtime.Image{Name: w.Name, Labels: map[string]string{runtime.LabelCreated: "true"}}
		res.Created = true
	}
	if img.Labels == nil {
		img.Labels = map[string]string{}
	}
	if ok && img.Target.Digest != w.Target.Digest {
		res.Retargeted = true
	}
	img.Target = w.Target
	if img.Labels[runtime.LabelPinned] != runtime.PinnedValue || img.Labels[runtime.LabelCRIPinned] != runtime.PinnedValue {
		if first && ok && img.Labels[runtime.LabelPinned] != runtime.PinnedValue && img.Labels[runtime.LabelCRIPinned] == runtime.PinnedValue {
			img.Labels[runtime.LabelPriorPin] = "true"
		}
		res.Labelled = ok
	}
	img.Labels[runtime.LabelPinned] = runtime.PinnedValue
	img.Labels[runtime.LabelCRIPinned] = runtime.PinnedValue
	r.records[w.Name] = img
	r.pins[w.Name]++
	r.held[w.Name] = r.Expires
	return res, nil
}

func (r *Runtime) Unpin(_ context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	img, ok := r.records[name]
	if !ok || img.Labels[runtime.LabelPinned] != runtime.PinnedValue {
		return nil
	}
	delete(img.Labels, runtime.LabelPinned)
	if img.Labels[runtime.LabelPriorPin] == "true" {
		delete(img.Labels, runtime.LabelPriorPin)
	} else {
		delete(img.Labels, runtime.LabelCRIPinned)
	}
	r.records[name] = img
	delete(r.held, name)
	return nil
}

func (r *Runtime) Delete(_ context.Context, name string, target digest.Digest) error {
	r.mu.Lock()
	img, ok := r.records[name]
	if !ok || !img.Made() || img.Target.Digest != target {
		r.mu.Unlock()
		return nil
	}
	delete(r.records, name)
	delete(r.held, name)
	r.mu.Unlock()
	select {
	case r.events <- runtime.ImageEvent{Kind: runtime.ImageDeleted, Name: name}:
	default: // nobody watches
	}
	return nil
}

func (r *Runtime) Release(_ context.Context, lease string) error {
	if !strings.HasPrefix(lease, runtime.LeasePrefix) {
		return fmt.Errorf("lease %s is not holdfast's", lease)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.states, lease)
	delete(r.leases, lease)
	return nil
}

func (r *Runtime) WatchImages(ctx context.Context) (<-chan runtime.ImageEvent, <-chan error) {
	out := make(chan runtime.ImageEvent)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-r.events:
				select {
				case out <- ev:
					r.mu.Lock()
					r.handed++
					r.mu.Unlock()
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	errc := make(chan error, 1)
	r.mu.Lock()
	r.streams = append(r.streams, errc)
	r.mu.Unlock()
	return out, errc
}

// Cleanup holds exactly the records holdfast pins, as containerd's adapter
// does (its ingests are never stale: the fake writes each blob at once).
func (r *Runtime) Cleanup(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held = map[string]bool{}
	for name, img := range r.records {
		r.held[name] = r.Expires && img.Owned()
	}
	return nil
}

func (r *Runtime) Close() error { return nil }

package fake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// The fake's content store and leases, in memory: what the real import
// (importer.Import) needs.

// ImportStore is the fake's store as the import sees it: what every pass over
// the fake imports through.
func (r *Runtime) ImportStore() runtime.Store { return store{r} }

// LeaseHolds says whether the lease id holds blob d.
func (r *Runtime) LeaseHolds(id string, d digest.Digest) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, ok := r.leases[id]
	return ok && l.held[d]
}

// LeaseLabels are the labels of the lease id, nil when there is none.
func (r *Runtime) LeaseLabels(id string) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l, ok := r.leases[id]; ok {
		return l.labels
	}
	return nil
}

// Leases counts the leases of the fake's store.
func (r *Runtime) Leases() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.leases)
}

// State is the state recorded on lease id.
func (r *Runtime) State(id string) (runtime.SourceState, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.states[id]
	return st, ok
}

// PutContent adds blobs to the store, held by no lease: content a pull or
// another client brought.
func (r *Runtime) PutContent(content map[digest.Digest][]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for d, b := range content {
		r.blobs[d] = b
	}
}

// DeleteBlob removes a blob from the store, as ctr content rm would.
func (r *Runtime) DeleteBlob(d digest.Digest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.blobs, d)
}

// Docs are the documents the imports wrote, in order; Syncs counts their syncs.
func (r *Runtime) Docs() []digest.Digest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.docs)
}

func (r *Runtime) Syncs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.syncs
}

// errNoBlob is a blob the fake's store does not hold.
var errNoBlob = oci.NotFound(errors.New("fake: blob not found"))

type fakeLease struct {
	labels map[string]string
	held   map[digest.Digest]bool
}

// store is the fake as an runtime.Store.
type store struct{ r *Runtime }

func (s store) Prepare(_ context.Context, req runtime.ImportRequest) error {
	if s.r.OnImport != nil {
		return s.r.OnImport(req)
	}
	return nil
}

func (s store) CreateLease(_ context.Context, id string, labels map[string]string) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if _, ok := s.r.leases[id]; !ok {
		s.r.leases[id] = &fakeLease{labels: labels, held: map[digest.Digest]bool{}}
	}
	return nil
}

func (s store) DeleteLease(_ context.Context, id string) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	delete(s.r.leases, id)
	delete(s.r.states, id)
	return nil
}

func (s store) ReadState(_ context.Context, id string) (runtime.SourceState, error) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if st, ok := s.r.states[id]; ok {
		return st, nil
	}
	if _, ok := s.r.leases[id]; ok {
		return runtime.SourceState{Lease: id}, nil
	}
	return runtime.SourceState{Lease: id}, fmt.Errorf("lease %s: %w", id, runtime.ErrNotFound)
}

func (s store) Intact(_ context.Context, st runtime.SourceState) (bool, error) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	for _, d := range st.Blobs {
		if _, ok := s.r.blobs[d]; !ok {
			return false, nil
		}
	}
	return true, nil
}

func (s store) Has(_ context.Context, d digest.Digest) (bool, error) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	_, ok := s.r.blobs[d]
	return ok, nil
}

func (s store) ReadBlob(_ context.Context, desc ocispec.Descriptor) ([]byte, error) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	b, ok := s.r.blobs[desc.Digest]
	if !ok {
		return nil, fmt.Errorf("%s: %w", desc.Digest, errNoBlob)
	}
	return b, nil
}

func (s store) AddToLease(_ context.Context, id string, ds []digest.Digest) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	l, ok := s.r.leases[id]
	if !ok {
		return fmt.Errorf("lease %s: %w", id, runtime.ErrNotFound)
	}
	for _, d := range ds {
		l.held[d] = true
	}
	return nil
}

func (store) LabelSources(context.Context, runtime.Names) error { return nil }
func (s store) Sync(context.Context) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.syncs++
	return nil
}
func (store) Platform() oci.Platform { return oci.HostPlatform() }

func (s store) NewSink(lease, _ string) runtime.Sink {
	return &sink{s: s, lease: lease, committed: map[digest.Digest]bool{}}
}

// sink commits each blob as it comes, on the import's lease.
type sink struct {
	s         store
	lease     string
	committed map[digest.Digest]bool
	stats     runtime.Stats
}

func (k *sink) put(d digest.Digest, b []byte) bool {
	r := k.s.r
	r.mu.Lock()
	defer r.mu.Unlock()
	_, had := r.blobs[d]
	if !had {
		r.blobs[d] = bytes.Clone(b)
		k.committed[d] = true
		k.stats.Written++
	}
	if l, ok := r.leases[k.lease]; ok {
		l.held[d] = true
	}
	return !had
}

func (k *sink) Has(ctx context.Context, d digest.Digest) (bool, error) {
	ok, err := k.s.Has(ctx, d)
	if ok {
		k.stats.Present++
	}
	return ok, err
}

func (k *sink) Put(_ context.Context, expected digest.Digest, size int64, rd io.Reader) (digest.Digest, error) {
	b, err := io.ReadAll(rd)
	if err != nil {
		return "", err
	}
	d := digest.FromBytes(b)
	if int64(len(b)) != size || (expected != "" && d != expected) {
		return "", fmt.Errorf("fake: blob %s of %d bytes, want %s of %d", d, len(b), expected, size)
	}
	k.put(d, b)
	return d, nil
}

func (k *sink) Reserve(context.Context, int, int64) error       { return nil }
func (k *sink) ReadPending(digest.Digest) ([]byte, bool, error) { return nil, false, nil }
func (k *sink) CommitPending(context.Context, runtime.Names) (map[digest.Digest]bool, error) {
	return map[digest.Digest]bool{}, nil
}
func (k *sink) Committed(d digest.Digest) bool { return k.committed[d] }

func (k *sink) WriteDoc(_ context.Context, desc ocispec.Descriptor, data []byte, _ []string) (bool, error) {
	if err := k.s.r.WriteDocErr; err != nil {
		return false, err
	}
	k.s.r.mu.Lock()
	k.s.r.docs = append(k.s.r.docs, desc.Digest)
	k.s.r.mu.Unlock()
	return k.put(desc.Digest, data), nil
}

// WriteState keeps the state as Sources reports it.
func (k *sink) WriteState(_ context.Context, st runtime.SourceState) error {
	data, err := runtime.EncodeState(st)
	if err != nil {
		return err
	}
	k.put(digest.FromBytes(data), data)
	read, err := runtime.DecodeState(data, st.Kept)
	if err != nil {
		return err
	}
	read.Lease = st.Lease
	k.s.r.mu.Lock()
	defer k.s.r.mu.Unlock()
	k.s.r.states[st.Lease] = read
	return nil
}

func (k *sink) Stats() runtime.Stats    { return k.stats }
func (k *sink) Abandon(context.Context) {}
func (k *sink) Close(context.Context)   {}

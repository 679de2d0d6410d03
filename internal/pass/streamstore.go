package pass

import (
	"context"
	"io"
	"slices"
	"sync"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
)

// recordingStore is the store a stream's import writes through
// (KeepStream): it notes every blob the import puts on its lease, so that
// they can go onto another lease once the stream's digest is known, and it
// keeps the import's state rather than record it, for that other lease.
type recordingStore struct {
	hfruntime.Store
	mu    sync.Mutex
	held  map[digest.Digest]bool
	state *hfruntime.SourceState
}

func (s *recordingStore) note(ds ...digest.Digest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range ds {
		s.held[d] = true
	}
}

// leased lists the blobs noted, sorted.
func (s *recordingStore) leased() []digest.Digest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]digest.Digest, 0, len(s.held))
	for d := range s.held {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

func (s *recordingStore) AddToLease(ctx context.Context, id string, ds []digest.Digest) error {
	if err := s.Store.AddToLease(ctx, id, ds); err != nil {
		return err
	}
	s.note(ds...)
	return nil
}

func (s *recordingStore) NewSink(lease, source string) hfruntime.Sink {
	return &recordingSink{Sink: s.Store.NewSink(lease, source), s: s}
}

// recordingSink notes the blobs its import commits (each is on the lease
// by its commit).
type recordingSink struct {
	hfruntime.Sink
	s    *recordingStore
	mu   sync.Mutex
	puts []digest.Digest // blobs put: noted at Close if they were committed
}

func (k *recordingSink) Put(ctx context.Context, expected digest.Digest, size int64, r io.Reader) (digest.Digest, error) {
	d, err := k.Sink.Put(ctx, expected, size, r)
	if err == nil {
		k.mu.Lock()
		k.puts = append(k.puts, d)
		k.mu.Unlock()
	}
	return d, err
}

func (k *recordingSink) CommitPending(ctx context.Context, names hfruntime.Names) (map[digest.Digest]bool, error) {
	done, err := k.Sink.CommitPending(ctx, names)
	for d := range done {
		k.s.note(d)
	}
	return done, err
}

func (k *recordingSink) WriteDoc(ctx context.Context, desc ocispec.Descriptor, data []byte, names []string) (bool, error) {
	committed, err := k.Sink.WriteDoc(ctx, desc, data, names)
	if err == nil && committed {
		k.s.note(desc.Digest)
	}
	return committed, err
}

// WriteState keeps the state: it is recorded on the kept source's lease.
func (k *recordingSink) WriteState(_ context.Context, st hfruntime.SourceState) error {
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	k.s.state = &st
	return nil
}

func (k *recordingSink) Close(ctx context.Context) {
	k.mu.Lock()
	for _, d := range k.puts {
		if k.Sink.Committed(d) {
			k.s.note(d)
		}
	}
	k.mu.Unlock()
	k.Sink.Close(ctx)
}

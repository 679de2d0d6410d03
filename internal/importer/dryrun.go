package importer

import (
	"context"
	"io"
	"sync"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// DryRun is s with every write left undone: an import over it reads the
// source and the store as a real one does and returns what it would, the
// names its images get or the error it would meet, and changes nothing. Its
// blobs are hashed and dropped; the documents it would write are kept in
// memory and read back as the store's (a signature judged after the
// import).
func DryRun(s runtime.Store) runtime.Store {
	return dryStore{s, &docMemo{m: map[digest.Digest][]byte{}}}
}

type dryStore struct {
	runtime.Store
	docs *docMemo
}

type docMemo struct {
	mu sync.Mutex
	m  map[digest.Digest][]byte
}

func (s dryStore) ReadBlob(ctx context.Context, desc ocispec.Descriptor) ([]byte, error) {
	s.docs.mu.Lock()
	b, ok := s.docs.m[desc.Digest]
	s.docs.mu.Unlock()
	if ok {
		return b, nil
	}
	return s.Store.ReadBlob(ctx, desc)
}

func (dryStore) Prepare(context.Context, runtime.ImportRequest) error         { return nil }
func (dryStore) CreateLease(context.Context, string, map[string]string) error { return nil }
func (dryStore) DeleteLease(context.Context, string) error                    { return nil }
func (dryStore) AddToLease(context.Context, string, []digest.Digest) error    { return nil }
func (dryStore) LabelSources(context.Context, runtime.Names) error            { return nil }
func (dryStore) Sync(context.Context) error                                   { return nil }

func (s dryStore) NewSink(string, string) runtime.Sink {
	return &drySink{s: s.Store, docs: s.docs, put: map[digest.Digest]bool{}}
}

// drySink hashes what it is given and keeps only the digests.
type drySink struct {
	s     runtime.Store
	docs  *docMemo
	put   map[digest.Digest]bool
	stats runtime.Stats
}

func (k *drySink) Has(ctx context.Context, d digest.Digest) (bool, error) {
	ok, err := k.s.Has(ctx, d)
	if ok {
		k.stats.Present++
	}
	return ok, err
}

func (k *drySink) Put(_ context.Context, _ digest.Digest, _ int64, r io.Reader) (digest.Digest, error) {
	d, err := digest.Canonical.FromReader(r)
	if err != nil {
		return "", err
	}
	k.put[d] = true
	k.stats.Written++
	return d, nil
}

func (k *drySink) Reserve(context.Context, int, int64) error { return nil }

func (k *drySink) ReadPending(digest.Digest) ([]byte, bool, error) { return nil, false, nil }

func (k *drySink) CommitPending(context.Context, runtime.Names) (map[digest.Digest]bool, error) {
	return map[digest.Digest]bool{}, nil
}

func (k *drySink) Committed(d digest.Digest) bool { return k.put[d] }

func (k *drySink) WriteDoc(ctx context.Context, desc ocispec.Descriptor, data []byte, _ []string) (bool, error) {
	k.docs.mu.Lock()
	k.docs.m[desc.Digest] = data
	k.docs.mu.Unlock()
	ok, err := k.s.Has(ctx, desc.Digest)
	return err == nil && !ok, err
}

func (k *drySink) WriteState(context.Context, runtime.SourceState) error { return nil }
func (k *drySink) Stats() runtime.Stats                                  { return k.stats }
func (k *drySink) Abandon(context.Context)                               {}
func (k *drySink) Close(context.Context)                                 {}

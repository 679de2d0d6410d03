package importer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/importer"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// memStore is a content store and its leases in memory: what an import needs
// of a backend, and nothing more, so these tests run the real import.
type memStore struct {
	mu      sync.Mutex
	blobs   map[digest.Digest][]byte
	leases  map[string]*memLease
	labels  map[digest.Digest][]string // names LabelSources was given
	docs    []digest.Digest            // documents in the order they were written
	synced  int
	failDoc bool // WriteDoc fails: an import that breaks half-way
}

type memLease struct {
	labels map[string]string
	held   map[digest.Digest]bool
	state  *runtime.SourceState
}

var errMemNotFound = errors.New("not in the memory store")

func newMemStore() *memStore {
	return &memStore{blobs: map[digest.Digest][]byte{}, leases: map[string]*memLease{}, labels: map[digest.Digest][]string{}}
}

func (s *memStore) Prepare(context.Context) error { return nil }

func (s *memStore) CreateLease(_ context.Context, id string, labels map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.leases[id]; !ok {
		s.leases[id] = &memLease{labels: labels, held: map[digest.Digest]bool{}}
	}
	return nil
}

func (s *memStore) DeleteLease(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.leases, id)
	return nil
}

func (s *memStore) ReadState(_ context.Context, id string) (runtime.SourceState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[id]
	if !ok {
		return runtime.SourceState{Lease: id}, fmt.Errorf("lease %s: %w", id, runtime.ErrNotFound)
	}
	if l.state == nil {
		return runtime.SourceState{Lease: id}, nil
	}
	return *l.state, nil
}

func (s *memStore) Intact(_ context.Context, st runtime.SourceState) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range st.Blobs {
		if _, ok := s.blobs[d]; !ok {
			return false, nil
		}
	}
	return true, nil
}

func (s *memStore) Has(_ context.Context, d digest.Digest) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.blobs[d]
	return ok, nil
}

func (s *memStore) ReadBlob(_ context.Context, desc ocispec.Descriptor) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.blobs[desc.Digest]
	if !ok {
		return nil, fmt.Errorf("%s: %w", desc.Digest, errMemNotFound)
	}
	return b, nil
}

func (s *memStore) IsNotFound(err error) bool { return errors.Is(err, errMemNotFound) }

func (s *memStore) AddToLease(_ context.Context, id string, ds []digest.Digest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[id]
	if !ok {
		return fmt.Errorf("lease %s: %w", id, runtime.ErrNotFound)
	}
	for _, d := range ds {
		l.held[d] = true
	}
	return nil
}

func (s *memStore) LabelSources(_ context.Context, names importer.Names) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for d, ns := range names {
		s.labels[d] = append(s.labels[d], ns...)
	}
	return nil
}

func (s *memStore) Sync(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.synced++
	return nil
}

func (s *memStore) NewSink(lease, _ string) importer.Sink {
	return &memSink{s: s, lease: lease, committed: map[digest.Digest]bool{}}
}

func (s *memStore) Platform() importer.Platform { return importer.HostPlatform() }

// memSink commits each blob as it comes, on the import's lease.
type memSink struct {
	s         *memStore
	lease     string
	mu        sync.Mutex
	committed map[digest.Digest]bool
	stats     importer.Stats
}

func (k *memSink) Has(ctx context.Context, d digest.Digest) (bool, error) {
	ok, err := k.s.Has(ctx, d)
	if ok {
		k.mu.Lock()
		k.stats.Present++
		k.mu.Unlock()
	}
	return ok, err
}

func (k *memSink) Put(_ context.Context, expected digest.Digest, size int64, r io.Reader) (digest.Digest, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return "", err
	}
	if int64(len(b)) != size {
		return "", fmt.Errorf("got %d bytes, want %d", len(b), size)
	}
	d := digest.FromBytes(b)
	if expected != "" && d != expected {
		return "", fmt.Errorf("digest %s, want %s", d, expected)
	}
	k.commit(d, b)
	return d, nil
}

// commit stores a blob on the lease; it reports false when it was there.
func (k *memSink) commit(d digest.Digest, b []byte) bool {
	k.s.mu.Lock()
	_, had := k.s.blobs[d]
	if !had {
		k.s.blobs[d] = bytes.Clone(b)
	}
	if l, ok := k.s.leases[k.lease]; ok {
		l.held[d] = true
	}
	k.s.mu.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	if had {
		return false
	}
	k.committed[d] = true
	k.stats.Written++
	return true
}

func (k *memSink) Reserve(context.Context, int, int64) error { return nil }

func (k *memSink) ReadPending(digest.Digest) ([]byte, bool, error) { return nil, false, nil }

func (k *memSink) CommitPending(context.Context, importer.Names) (map[digest.Digest]bool, error) {
	return map[digest.Digest]bool{}, nil
}

func (k *memSink) Committed(d digest.Digest) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.committed[d]
}

func (k *memSink) WriteDoc(_ context.Context, desc ocispec.Descriptor, data []byte, _ []string) (bool, error) {
	if k.s.failDoc {
		return false, errors.New("the store refuses the document")
	}
	k.s.mu.Lock()
	k.s.docs = append(k.s.docs, desc.Digest)
	k.s.mu.Unlock()
	return k.commit(desc.Digest, data), nil
}

func (k *memSink) WriteState(_ context.Context, st runtime.SourceState) error {
	data, err := runtime.EncodeState(st)
	if err != nil {
		return err
	}
	k.commit(digest.FromBytes(data), data)
	kept := st.Kept
	read, err := runtime.DecodeState(data, kept)
	if err != nil {
		return err
	}
	read.Lease = st.Lease
	read.Intact = true
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	k.s.leases[k.lease].state = &read
	return nil
}

func (k *memSink) Stats() importer.Stats {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.stats
}

func (k *memSink) Abandon(context.Context) {}
func (k *memSink) Close(context.Context)   {}

// archiveOf is an OCI archive of imgs, as an import request opens it.
func archiveOf(t *testing.T, imgs ...*fixture.Image) func() (io.ReadCloser, error) {
	t.Helper()
	var buf bytes.Buffer
	if err := fixture.WriteOCI(context.Background(), &buf, fixture.OCIOptions{Names: fixture.NameContainerd}, imgs...); err != nil {
		t.Fatal(err)
	}
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil }
}

func image(t *testing.T, name string, seed int64) *fixture.Image {
	t.Helper()
	img, err := fixture.Build(context.Background(), fixture.ImageSpec{Names: []string{name}, Layers: fixture.UniformLayers(2, 32<<10, false, seed)})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestImportLeasesAndRecords: an import stores every host blob, holds all of
// them and its state on the source's lease, names each image and its
// repo@digest, writes documents children first, syncs once, and a second
// import at the same identity reads nothing.
func TestImportLeasesAndRecords(t *testing.T) {
	ctx := context.Background()
	s := newMemStore()
	img := image(t, "example.com/team/app:1", 1)
	req := runtime.ImportRequest{Source: "/images/app.tar", Identity: "id-1", Open: archiveOf(t, img)}
	res, err := importer.Import(ctx, s, req)
	if err != nil {
		t.Fatal(err)
	}
	id := runtime.LeaseID(req.Source, req.Identity)
	var names []string
	for _, w := range res.Images {
		names = append(names, w.Name)
	}
	if res.Lease != id || res.Unchanged || len(names) != 2 || names[0] != "example.com/team/app:1" || !strings.HasPrefix(names[1], "example.com/team/app@sha256:") {
		t.Fatalf("result %+v (names %v)", res, names)
	}
	l := s.leases[id]
	m := img.ManifestFor(fixture.HostPlatform())
	for _, d := range append([]digest.Digest{m.Config.Digest}, m.Layers[0].Digest(), m.Layers[1].Digest(), res.Images[0].Target.Digest) {
		if !l.held[d] {
			t.Errorf("the lease does not hold %s", d)
		}
	}
	if l.labels[runtime.LabelSource] != req.Source || l.state == nil || !l.state.Complete || len(l.state.Images) != 2 || len(l.state.Blobs) == 0 {
		t.Errorf("lease labels %v, state %+v", l.labels, l.state)
	}
	if s.synced != 1 {
		t.Errorf("synced %d times, want once", s.synced)
	}
	// The target (an index or manifest) is written last of its documents.
	if last := s.docs[len(s.docs)-1]; last != res.Images[0].Target.Digest {
		t.Errorf("documents written in the order %v; the target %s must come last", s.docs, res.Images[0].Target.Digest)
	}

	req.Open = func() (io.ReadCloser, error) { t.Fatal("an unchanged source was opened"); return nil, nil }
	again, err := importer.Import(ctx, s, req)
	if err != nil || !again.Unchanged || len(again.Images) != 2 {
		t.Errorf("again: %+v, %v; want unchanged with the same images", again, err)
	}
}

// TestKeptImportIsMarked: a kept import's lease is the kept one, labelled
// kept with its source marked, and its state reads back as the path.
func TestKeptImportIsMarked(t *testing.T) {
	s := newMemStore()
	req := runtime.ImportRequest{Source: "/tmp/app.tar", Identity: "id", Kept: true, Open: archiveOf(t, image(t, "example.com/kept/app:1", 2))}
	res, err := importer.Import(context.Background(), s, req)
	if err != nil {
		t.Fatal(err)
	}
	l := s.leases[runtime.KeptLeaseID(req.Source, req.Identity)]
	if res.Lease != runtime.KeptLeaseID(req.Source, req.Identity) || l == nil {
		t.Fatalf("lease %s; leases %v", res.Lease, slices.Collect(func(yield func(string) bool) {
			for k := range s.leases {
				if !yield(k) {
					return
				}
			}
		}))
	}
	if l.labels[runtime.LabelKept] != "true" || l.labels[runtime.LabelSource] != "kept:/tmp/app.tar" || l.labels[runtime.LabelImportedAt] == "" {
		t.Errorf("kept lease labels %v", l.labels)
	}
	if l.state == nil || l.state.Source != req.Source || !l.state.Kept {
		t.Errorf("state %+v", l.state)
	}
}

// TestFailedImportLeavesNoLease: an import that fails half-way (the store
// refuses a document) drops the lease it made, so nothing holds what it
// wrote; one whose lease held a complete import keeps that lease.
func TestFailedImportLeavesNoLease(t *testing.T) {
	ctx := context.Background()
	s := newMemStore()
	s.failDoc = true
	req := runtime.ImportRequest{Source: "/images/app.tar", Identity: "id-1", Open: archiveOf(t, image(t, "example.com/fail/app:1", 3))}
	if _, err := importer.Import(ctx, s, req); err == nil || !strings.Contains(err.Error(), "refuses the document") {
		t.Fatalf("import: %v; want the document's error", err)
	}
	if len(s.leases) != 0 {
		t.Errorf("leases left: %d", len(s.leases))
	}

	s.failDoc = false
	if _, err := importer.Import(ctx, s, req); err != nil {
		t.Fatal(err)
	}
	id := runtime.LeaseID(req.Source, req.Identity)
	delete(s.blobs, s.leases[id].state.Blobs[0]) // not intact: the next import reads the archive again
	s.failDoc = true
	if _, err := importer.Import(ctx, s, req); err == nil {
		t.Fatal("the failing import succeeded")
	}
	if l := s.leases[id]; l == nil || l.state == nil {
		t.Error("the lease of the complete import is gone")
	}
}

// TestIncompleteImageFails: an image whose host-platform layer is neither
// in the archive nor in the store fails the import, naming the blob.
func TestIncompleteImageFails(t *testing.T) {
	img := image(t, "example.com/partial/app:1", 4)
	layer := img.ManifestFor(fixture.HostPlatform()).Layers[0].Digest()
	var buf bytes.Buffer
	if err := fixture.WriteOCI(context.Background(), &buf, fixture.OCIOptions{Names: fixture.NameContainerd, OmitBlobs: []digest.Digest{layer}}, img); err != nil {
		t.Fatal(err)
	}
	s := newMemStore()
	_, err := importer.Import(context.Background(), s, runtime.ImportRequest{Source: "/images/p.tar", Identity: "id",
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil }})
	if err == nil || !strings.Contains(err.Error(), layer.String()) || !strings.Contains(err.Error(), "neither in the archive nor in the store") {
		t.Errorf("import: %v; want an error naming %s", err, layer)
	}
	if len(s.leases) != 0 {
		t.Errorf("leases left: %d", len(s.leases))
	}
}

// TestLeaseWantsLeavesOutIncomplete: a list's wants are leased when their
// content is in the store; one whose layer is gone is left out and reported.
func TestLeaseWantsLeavesOutIncomplete(t *testing.T) {
	ctx := context.Background()
	s := newMemStore()
	a, b := image(t, "example.com/list/a:1", 5), image(t, "example.com/list/b:1", 6)
	res, err := importer.Import(ctx, s, runtime.ImportRequest{Source: "/images/ab.tar", Identity: "id", Open: archiveOf(t, a, b)})
	if err != nil {
		t.Fatal(err)
	}
	delete(s.blobs, b.ManifestFor(fixture.HostPlatform()).Layers[1].Digest())
	var wants []runtime.Want
	for _, w := range res.Images {
		if !strings.Contains(w.Name, "@") {
			wants = append(wants, w)
		}
	}
	got, err := importer.LeaseWants(ctx, s, runtime.LeaseRequest{Source: "/images/list.pins", Identity: "lid", Wants: wants})
	if err == nil || !strings.Contains(err.Error(), "example.com/list/b:1") {
		t.Errorf("LeaseWants error %v; want one naming b:1", err)
	}
	if len(got.Images) != 1 || got.Images[0].Name != "example.com/list/a:1" {
		t.Errorf("leased %+v; want a:1 only", got.Images)
	}
	if l := s.leases[got.Lease]; l == nil || l.state == nil || len(l.state.Images) != 1 {
		t.Errorf("list lease %+v", l)
	}
}

package containerd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// writeChunk is the size of each write to the content store: just under a power
// of two, which costs the kernel far less than a power of two on this kind of VM.
const writeChunk = 1<<20 - 4<<10

// abandonTimeout bounds the clean-up of a failed or cancelled import.
const abandonTimeout = 30 * time.Second

var chunkPool = sync.Pool{New: func() any { b := make([]byte, writeChunk); return &b }}

// ImportStore is containerd's content store and leases as an import writes
// them (importer.Import, importer.LeaseWants).
func (r *Runtime) ImportStore() runtime.Store { return importStore{r} }

// importStore is containerd's content store and leases as an import needs them.
type importStore struct{ r *Runtime }

func (s importStore) Prepare(ctx context.Context, _ runtime.ImportRequest) error {
	if err := s.r.forgetLost(ctx); err != nil {
		return fmt.Errorf("removing the records of blobs whose files are gone: %w", err)
	}
	return nil
}

func (s importStore) CreateLease(ctx context.Context, id string, labels map[string]string) error {
	_, err := s.r.client.LeasesService().Create(ctx, leases.WithID(id), leases.WithLabels(labels))
	if err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("creating lease %s: %w", id, err)
	}
	return nil
}

func (s importStore) DeleteLease(ctx context.Context, id string) error {
	return s.r.client.LeasesService().Delete(ctx, leases.Lease{ID: id}, leases.SynchronousDelete)
}

func (s importStore) ReadState(ctx context.Context, id string) (runtime.SourceState, error) {
	return s.r.readState(ctx, id)
}

func (s importStore) Intact(ctx context.Context, st runtime.SourceState) (bool, error) {
	return s.r.intact(ctx, st)
}

func (s importStore) Has(ctx context.Context, d digest.Digest) (bool, error) {
	_, err := s.r.client.ContentStore().Info(ctx, d)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

func (s importStore) ReadBlob(ctx context.Context, desc ocispec.Descriptor) ([]byte, error) {
	return s.r.readBlob(ctx, desc)
}

func (s importStore) AddToLease(ctx context.Context, id string, ds []digest.Digest) error {
	return s.r.addToLease(leases.WithLease(ctx, id), ds)
}

func (s importStore) LabelSources(ctx context.Context, names runtime.Names) error {
	return s.r.labelSources(ctx, sourceLabelsOf(names))
}

func (s importStore) Sync(ctx context.Context) error { return s.r.syncBlobsDir(ctx) }

func (s importStore) NewSink(lease, source string) runtime.Sink {
	return &leasedSink{ing: s.r.newIngester(), lease: lease, source: source}
}

func (s importStore) Platform() oci.Platform { return s.r.platform }

// leasedSink is one import's ingester, each write under the import's lease.
type leasedSink struct {
	ing    *ingester
	lease  string
	source string // for the log
}

func (s *leasedSink) leased(ctx context.Context) context.Context {
	return leases.WithLease(ctx, s.lease)
}

func (s *leasedSink) Has(ctx context.Context, d digest.Digest) (bool, error) {
	return s.ing.Has(s.leased(ctx), d)
}

func (s *leasedSink) Put(ctx context.Context, expected digest.Digest, size int64, r io.Reader) (digest.Digest, error) {
	return s.ing.Put(s.leased(ctx), expected, size, r)
}

func (s *leasedSink) Reserve(ctx context.Context, blobs int, bytes int64) error {
	return s.ing.Reserve(s.leased(ctx), blobs, bytes)
}

func (s *leasedSink) ReadPending(d digest.Digest) ([]byte, bool, error) { return s.ing.readPending(d) }

func (s *leasedSink) CommitPending(ctx context.Context, names runtime.Names) (map[digest.Digest]bool, error) {
	return s.ing.commitPending(s.leased(ctx), sourceLabelsOf(names))
}

func (s *leasedSink) Committed(d digest.Digest) bool {
	s.ing.mu.Lock()
	defer s.ing.mu.Unlock()
	return s.ing.committed[d]
}

// WriteDoc writes a document with the labels that let containerd's GC
// follow it to its children, and, when this call commits it, the
// distribution source labels of its images.
func (s *leasedSink) WriteDoc(ctx context.Context, desc ocispec.Descriptor, data []byte, names []string) (bool, error) {
	var labels map[string]string
	if oci.IsDoc(desc.MediaType) {
		var err error
		if labels, err = gcLabels(desc, data); err != nil {
			return false, err
		}
	}
	return s.ing.writeDoc(s.leased(ctx), desc, data, labels, sourceLabelsOf(runtime.Names{desc.Digest: names}).labelsOf(desc.Digest))
}

func (s *leasedSink) WriteState(ctx context.Context, st runtime.SourceState) error {
	return s.ing.r.writeState(s.leased(ctx), s.ing, st)
}

func (s *leasedSink) Stats() runtime.Stats {
	s.ing.mu.Lock()
	defer s.ing.mu.Unlock()
	return runtime.Stats{Written: s.ing.written, Present: s.ing.present, Direct: s.ing.direct}
}

// Abandon aborts the import's ingests still open.
func (s *leasedSink) Abandon(ctx context.Context) {
	cs := s.ing.r.client.ContentStore()
	s.ing.mu.Lock()
	open := slices.Collect(maps.Keys(s.ing.open))
	s.ing.mu.Unlock()
	for _, ref := range open {
		_ = cs.Abort(ctx, ref)
	}
}

// Close removes what the import linked and did not get recorded, and the
// temp files of blobs it held back and never committed.
func (s *leasedSink) Close(ctx context.Context) {
	s.ing.closeLinks(ctx)
	s.ing.dropPending()
	if d := s.ing.r.direct; s.ing.direct+s.ing.restreamed > 0 && d != nil && d.opts.Log != nil {
		d.opts.Log.Debug("blobs written directly into the content store", "source", s.source, "blobs", s.ing.direct, "restreamed", s.ing.restreamed)
	}
}

func (r *Runtime) addToLease(ctx context.Context, ds []digest.Digest) error {
	id := leaseFromContext(ctx)
	ls := r.client.LeasesService()
	slices.Sort(ds)
	for _, d := range slices.Compact(ds) {
		if err := ls.AddResource(ctx, leases.Lease{ID: id}, leases.Resource{ID: d.String(), Type: "content"}); err != nil {
			return fmt.Errorf("adding %s to lease %s: %w", d, id, err)
		}
	}
	return nil
}

func leaseFromContext(ctx context.Context) string {
	id, _ := leases.FromContext(ctx)
	return id
}

func (r *Runtime) newIngester() *ingester {
	prefix := refPrefix + r.owner + "-" + r.run + "-" + randomHex(6) + "-"
	return &ingester{r: r, prefix: prefix, committed: map[digest.Digest]bool{}, open: map[string]bool{}, pending: map[digest.Digest]*os.File{}, failed: map[digest.Digest]bool{}}
}

// ingester is the archive.Store of one import: it writes blobs under the
// import's lease with unique refs and remembers what it did.
type ingester struct {
	r         *Runtime
	prefix    string
	n         int
	mu        sync.Mutex
	committed map[digest.Digest]bool     // committed by this import, so already on the lease
	open      map[string]bool            // refs not yet committed
	pending   map[digest.Digest]*os.File // verified temp files of direct writes, committed after the walk
	links     *linkJournal               // the blobs linked into the store directly (see linkedPrefix)
	failed    map[digest.Digest]bool     // commits that failed: their files may be in place, unrecorded
	written   int
	present   int
	direct    int // blobs committed by metadata only, their files placed by holdfast
	// restreamed counts blobs placed and linked whose commit found the store
	// wanting their bytes (its GC swept the file first): streamed after all.
	restreamed int
}

func (w *ingester) nextRef() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n++
	ref := fmt.Sprintf("%s%d", w.prefix, w.n)
	w.open[ref] = true
	return ref
}

func (w *ingester) done(ref string, d digest.Digest, committed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.open, ref)
	if committed {
		w.committed[d] = true
	}
}

// Has reports whether the store holds the blob already.
func (w *ingester) Has(ctx context.Context, d digest.Digest) (bool, error) {
	_, err := w.r.client.ContentStore().Info(ctx, d)
	if err == nil {
		w.mu.Lock()
		w.present++
		w.mu.Unlock()
		return true, nil
	}
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	return false, fmt.Errorf("checking blob %s: %w", d, err)
}

// Put streams one blob into the store.
func (w *ingester) Put(ctx context.Context, expected digest.Digest, size int64, r io.Reader) (digest.Digest, error) {
	// A stream's blobs are known one at a time: each is checked as it comes.
	what := "a blob needs"
	if expected != "" {
		what = "blob " + expected.String() + " needs"
	}
	if err := w.r.space.check(ctx, w.r, what, 1, size); err != nil {
		return "", err
	}
	root, err := w.r.direct.rootFor(ctx, w.r)
	if err != nil {
		return "", err
	}
	if root != "" {
		if d, consumed, err := w.placeBlob(ctx, root, expected, size, r); consumed {
			return d, err
		}
	}
	d, committed, err := w.put(ctx, ocispec.Descriptor{Digest: expected, Size: size}, r, nil, nil)
	if err == nil && committed {
		w.mu.Lock()
		w.written++
		w.mu.Unlock()
	}
	return d, err
}

// writeDoc writes a document with labels; fresh labels go on it only when
// this call commits it (see put).
func (w *ingester) writeDoc(ctx context.Context, desc ocispec.Descriptor, data []byte, labels, fresh map[string]string) (bool, error) {
	_, committed, err := w.put(ctx, desc, bytesReader(data), labels, fresh)
	return committed, err
}

// put writes one blob. It reports whether this call committed it (and so put it
// on the lease in the same transaction); a blob that was already there has its
// labels brought up to date instead. The fresh labels are committed with the
// blob and never set on one that was there: they are values a caller merges
// into what is there otherwise (labelSources).
func (w *ingester) put(ctx context.Context, desc ocispec.Descriptor, r io.Reader, labels, fresh map[string]string) (digest.Digest, bool, error) {
	ref := w.nextRef()
	cw, offset, err := w.r.openBlob(ctx, ref, desc)
	if err != nil {
		w.done(ref, "", false)
		if errdefs.IsAlreadyExists(err) && desc.Digest != "" {
			return desc.Digest, false, w.ensureLabels(ctx, desc.Digest, labels)
		}
		return "", false, fmt.Errorf("opening writer for %s: %w", blobName(desc), err)
	}
	defer cw.Close()
	// A blob that another namespace holds already is "shared": the writer
	// starts at its full size, and writing would append to it. Commit it as it
	// is; restart anything else that does not start at zero.
	if offset > 0 {
		if desc.Digest != "" && offset == desc.Size {
			return w.commit(ctx, cw, ref, desc.Digest, desc.Size, labels, fresh)
		}
		cw.restart()
	}

	var digester digest.Digester
	dst := io.Writer(cw)
	if desc.Digest == "" {
		digester = digest.Canonical.Digester()
		dst = io.MultiWriter(cw, digester.Hash())
	}
	bufp := chunkPool.Get().(*[]byte)
	n, err := copyFull(dst, r, *bufp)
	chunkPool.Put(bufp)
	if err != nil {
		return "", false, fmt.Errorf("writing %s: %w", blobName(desc), err)
	}
	if n != desc.Size {
		return "", false, fmt.Errorf("writing %s: got %d bytes, want %d", blobName(desc), n, desc.Size)
	}
	d := desc.Digest
	if d == "" {
		d = digester.Digest()
	}
	return w.commit(ctx, cw, ref, d, desc.Size, labels, fresh)
}

// commit finishes a write, with labels and fresh labels (see put); a blob
// that exists already is not an error.
func (w *ingester) commit(ctx context.Context, cw *blobWriter, ref string, d digest.Digest, size int64, labels, fresh map[string]string) (digest.Digest, bool, error) {
	cs := w.r.client.ContentStore()
	all := labels
	if len(fresh) > 0 {
		all = maps.Clone(fresh)
		maps.Copy(all, labels)
	}
	if err := cw.Commit(size, d, all); err != nil {
		if errdefs.IsAlreadyExists(err) {
			_ = cs.Abort(ctx, ref)
			w.done(ref, d, false)
			return d, false, w.ensureLabels(ctx, d, labels)
		}
		// containerd may have moved the blob's file into place before its
		// record failed (the lease was released under the import): the
		// import removes it when it ends, if nothing records it.
		w.mu.Lock()
		w.failed[d] = true
		w.mu.Unlock()
		return "", false, fmt.Errorf("committing %s: %w", d, err)
	}
	w.done(ref, d, true)
	return d, true, nil
}

// ensureLabels sets the given content labels, key by key, where they differ.
func (w *ingester) ensureLabels(ctx context.Context, d digest.Digest, labels map[string]string) error {
	if len(labels) == 0 {
		return nil
	}
	cs := w.r.client.ContentStore()
	info, err := cs.Info(ctx, d)
	if err != nil {
		return fmt.Errorf("reading labels of %s: %w", d, err)
	}
	var paths []string
	for k, v := range labels {
		if info.Labels[k] != v {
			if info.Labels == nil {
				info.Labels = map[string]string{}
			}
			info.Labels[k] = v
			paths = append(paths, "labels."+k)
		}
	}
	if len(paths) == 0 {
		return nil
	}
	if _, err := cs.Update(ctx, info, paths...); err != nil {
		return fmt.Errorf("labelling %s: %w", d, err)
	}
	return nil
}

func blobName(desc ocispec.Descriptor) string {
	if desc.Digest != "" {
		return desc.Digest.String()
	}
	return fmt.Sprintf("blob of %d bytes", desc.Size)
}

// copyFull copies src to dst in writes of len(buf) bytes, the last one
// shorter. Each write to the content store is one message and one round trip,
// and the store's cost per message is high: a decompressor or tar reader that
// returns a block at a time (zstd: at most 128 KiB) must not set the message
// size, so reads are gathered until the buffer is full.
func copyFull(dst io.Writer, src io.Reader, buf []byte) (int64, error) {
	var total int64
	for {
		n, err := io.ReadFull(src, buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
		}
		switch err {
		case nil:
		case io.EOF, io.ErrUnexpectedEOF:
			return total, nil
		default:
			return total, err
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

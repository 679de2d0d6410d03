package containerd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/archive"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// writeChunk is the size of each write to the content store: just under a power
// of two, which costs the kernel far less than a power of two on this kind of VM.
const writeChunk = 1<<20 - 4<<10

// maxDocSize bounds an index or manifest read back from the store (or a held
// blob) to walk an image: registries take at most 4 MiB.
const maxDocSize = 16 << 20

// abandonTimeout bounds the clean-up of a failed or cancelled import.
const abandonTimeout = 30 * time.Second

var chunkPool = sync.Pool{New: func() any { b := make([]byte, writeChunk); return &b }}

// Import walks one archive or OCI layout directory into the store under the
// source's lease, checks the host platform's content is complete, and saves the
// source's desired state on the lease. On any error nothing of the source is
// left but what its lease already held from an earlier complete import.
func (r *Runtime) Import(ctx context.Context, req runtime.ImportRequest) (runtime.ImportResult, error) {
	ctx = r.ns(ctx)
	id := runtime.LeaseID(req.Source, req.Identity)
	if req.Kept {
		id = runtime.KeptLeaseID(req.Source, req.Identity)
		if err := r.createKept(ctx, id, req); err != nil {
			return runtime.ImportResult{Lease: id}, err
		}
	}
	res := runtime.ImportResult{Lease: id}
	if err := r.forgetLost(ctx); err != nil {
		return res, fmt.Errorf("removing the records of blobs whose files are gone: %w", err)
	}

	prior, unchanged, err := r.openLease(ctx, id, req.Source, req.Identity, req.Prior)
	if err != nil || unchanged {
		res.Images, res.Unchanged = prior.Images, unchanged
		return res, err
	}
	lctx := leases.WithLease(ctx, id)
	ing := r.newIngester()
	defer ing.dropPending()
	defer ing.closeLinks(ctx)

	wants, err := r.importLeased(lctx, req, ing, &res)
	if err != nil {
		// A lease that held a complete import keeps what it held; one made
		// for this import, or left by an unfinished one, goes.
		r.abandon(ctx, id, !prior.Complete, ing)
		return res, noSpace(err)
	}
	if err := r.syncBlobsDir(ctx); err != nil {
		r.abandon(ctx, id, !prior.Complete, ing)
		return res, err
	}
	res.Images = wants
	if ing.direct > 0 && r.direct != nil && r.direct.opts.Log != nil {
		r.direct.opts.Log.Debug("blobs written directly into the content store", "source", req.Source, "blobs", ing.direct)
	}
	return res, nil
}

func (r *Runtime) importLeased(ctx context.Context, req runtime.ImportRequest, ing *ingester, res *runtime.ImportResult) ([]runtime.Want, error) {
	var (
		walked *archive.Result
		err    error
	)
	if req.Dir {
		walked, err = archive.WalkDir(ctx, req.Source, ing)
	} else {
		var rc io.ReadCloser
		if rc, err = req.Open(); err != nil {
			return nil, err
		}
		walked, err = archive.Walk(ctx, rc, ing)
		if cerr := rc.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}
	if walked != nil {
		res.BytesRead = walked.BytesRead
		res.Format = string(walked.Format)
	}
	if err != nil {
		return nil, err
	}

	wants := withDigestNames(walked.Images)
	read := func(ctx context.Context, desc ocispec.Descriptor) ([]byte, error) {
		if b, ok := walked.Docs[desc.Digest]; ok {
			return b, nil
		}
		if desc.Size > maxDocSize {
			return nil, fmt.Errorf("%s %s: %d bytes is too large for an image document (at most %d)", kind(desc.MediaType), desc.Digest, desc.Size, maxDocSize)
		}
		if b, ok, err := ing.readPending(desc.Digest); ok || err != nil {
			return b, err
		}
		return content.ReadBlob(ctx, r.client.ContentStore(), desc)
	}
	// Everything the images need, parents before children.
	var need []blobRef
	index := map[digest.Digest]int{}
	sources := sourceLabels{}
	for _, img := range walked.Images {
		refs, err := r.closure(ctx, img.Target, read)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", img.Name, err)
		}
		sources.add(img.Name, digestsOf(refs))
		for _, ref := range refs {
			if i, ok := index[ref.desc.Digest]; ok {
				need[i].required = need[i].required || ref.required
				continue
			}
			index[ref.desc.Digest] = len(need)
			need = append(need, ref)
		}
	}
	// Blobs placed directly are made durable together and recorded now that
	// their images, so their labels, are known.
	labelled, err := ing.commitPending(ctx, sources)
	if err != nil {
		return nil, err
	}
	res.Written = ing.written
	// Check completeness before writing anything that points at other blobs.
	cs := r.client.ContentStore()
	var toLease []digest.Digest
	for _, ref := range need {
		d := ref.desc.Digest
		if _, ok := walked.Docs[d]; ok {
			continue
		}
		if _, ok := walked.Blobs[d]; ok {
			if !ing.committed[d] {
				toLease = append(toLease, d)
			}
			continue
		}
		if _, err := cs.Info(ctx, d); err == nil {
			res.Present++
			toLease = append(toLease, d)
			continue
		} else if !errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("checking blob %s: %w", d, err)
		}
		if ref.required {
			return nil, fmt.Errorf("%s %s %s is neither in the archive nor in the store", r.platform, kind(ref.desc.MediaType), d)
		}
	}
	res.Present += ing.present
	// Documents, children first, with the labels that let GC follow them.
	for i := len(need) - 1; i >= 0; i-- {
		desc := need[i].desc
		data, ok := walked.Docs[desc.Digest]
		if !ok {
			continue
		}
		var labels map[string]string
		if isDocType(desc.MediaType) {
			if labels, err = gcLabels(desc, data); err != nil {
				return nil, err
			}
		}
		committed, err := ing.writeDoc(ctx, desc, data, labels, sources.labelsOf(desc.Digest))
		if err != nil {
			return nil, err
		}
		if committed {
			res.Written++
			labelled[desc.Digest] = true
		} else {
			toLease = append(toLease, desc.Digest)
		}
	}
	if err := r.addToLease(ctx, toLease); err != nil {
		return nil, err
	}
	// Every blob is in the store now, written or found there: label each
	// with where its images come from, for K3s's embedded registry mirror.
	// Blobs this import committed carry their labels already.
	for d := range labelled {
		delete(sources, d)
	}
	if err := r.labelSources(ctx, sources); err != nil {
		return nil, err
	}
	var required []digest.Digest
	var size int64
	for _, ref := range need {
		if ref.required {
			required = append(required, ref.desc.Digest)
			size += ref.desc.Size
		}
	}
	state := runtime.SourceState{Lease: leaseFromContext(ctx), Source: req.Source, Kept: req.Kept, Identity: req.Identity, MtimeNs: req.MtimeNs, Images: wants, Blobs: required, Size: size}
	if err := r.writeState(ctx, ing, state); err != nil {
		return nil, err
	}
	return wants, nil
}

// abandon removes what a failed import left: its ingests and, when the lease
// was made by this import, the lease and so every blob only it held.
func (r *Runtime) abandon(ctx context.Context, id string, dropLease bool, ing *ingester) {
	// The import may have ended because ctx was cancelled (a shutdown): clean
	// up all the same, for a bounded time.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
	defer cancel()
	cs := r.client.ContentStore()
	for ref := range ing.open {
		_ = cs.Abort(ctx, ref)
	}
	if dropLease {
		_ = r.client.LeasesService().Delete(ctx, leases.Lease{ID: id}, leases.SynchronousDelete)
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

// withDigestNames adds a repo@digest name for every repo:tag name, so that
// digest references resolve too.
func withDigestNames(imgs []archive.Image) []runtime.Want {
	seen := map[string]bool{}
	var out []runtime.Want
	add := func(name string, target ocispec.Descriptor) {
		if !seen[name] {
			seen[name] = true
			out = append(out, runtime.Want{Name: name, Target: target})
		}
	}
	for _, img := range imgs {
		add(img.Name, img.Target)
		if dn, ok := digestName(img.Name, img.Target.Digest); ok {
			add(dn, img.Target)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// openLease reads a source's lease at this identity. When it holds a complete
// import whose content is intact, the source is unchanged and nothing more is
// to be done; otherwise the lease is made (or kept) for a new import.
// known is the state the caller read already, if any.
func (r *Runtime) openLease(ctx context.Context, id, source, identity string, known *runtime.SourceState) (runtime.SourceState, bool, error) {
	var prior runtime.SourceState
	if known != nil && known.Lease == id && known.Complete {
		if prior = *known; prior.Intact {
			return prior, true, nil
		}
	} else {
		var err error
		if prior, err = r.readState(ctx, id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return prior, false, err
		}
	}
	if prior.Complete {
		if ok, err := r.intact(ctx, prior); err != nil || ok {
			return prior, ok, err
		}
	}
	if _, err := r.client.LeasesService().Create(ctx, leases.WithID(id), leases.WithLabels(map[string]string{
		runtime.LabelSource:   runtime.TruncateLabel(source),
		runtime.LabelIdentity: runtime.TruncateLabel(identity),
	})); err != nil && !errdefs.IsAlreadyExists(err) {
		return prior, false, fmt.Errorf("creating lease %s: %w", id, err)
	}
	return prior, false, nil
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

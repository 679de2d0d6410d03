package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/holdfast-project/holdfast/internal/files"
)

// WritePath is how imports write blobs into the content store.
type WritePath string

const (
	// WriteStream sends every blob through containerd's content API.
	WriteStream WritePath = "stream"
	// WriteDirect writes blobs into the content store's directory and has
	// containerd record them by metadata only; imports fail when it cannot.
	WriteDirect WritePath = "direct"
	// WriteAuto writes directly when it can, and streams otherwise.
	WriteAuto WritePath = "auto"
)

// ParseWritePath reads a --write-path value.
func ParseWritePath(s string) (WritePath, error) {
	switch p := WritePath(s); p {
	case WriteStream, WriteDirect, WriteAuto:
		return p, nil
	}
	return "", fmt.Errorf("write path %q: want auto, direct or stream", s)
}

// WriteOptions set how imports write blobs.
type WriteOptions struct {
	Path WritePath
	// ContentRoot is the content store's directory as holdfast sees it;
	// empty asks containerd.
	ContentRoot string
	Log         *slog.Logger
}

// tempDirName is the directory, beside the store's blobs and ingest
// directories, where blobs are written before they are linked into place.
// containerd walks neither it nor its files; holdfast removes what a crash
// left there.
const tempDirName = "holdfast-tmp"

// metadataPlugin is the introspection filter of the metadata plugin, which
// exports its content sharing policy as "policy".
const metadataPlugin = "type==io.containerd.metadata.v1,id==bolt"

// directWriter decides, once, whether imports can write blobs straight into
// the content store's directory.
type directWriter struct {
	opts     WriteOptions
	mu       sync.Mutex
	resolved bool
	root     string                // empty: stream
	err      error                 // why direct writes are not possible
	fellBack bool                  // a blob fell back to streaming: logged once
	probe    func(context.Context) // removes the probe blob of probeRoot
}

// rootFor returns the content root to write blobs into, or "" to stream. An
// error means --write-path=direct cannot be honoured.
func (d *directWriter) rootFor(ctx context.Context, r *Runtime) (string, error) {
	if d == nil || d.opts.Path == WriteStream || d.opts.Path == "" {
		return "", nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.resolved {
		root, err := d.resolve(ctx, r)
		if err != nil && ctx.Err() != nil {
			return "", err // try again on the next import
		}
		d.resolved, d.root, d.err = true, root, err
		if d.opts.Log != nil {
			if err != nil {
				d.opts.Log.Info("imports stream blobs through containerd: the content store's directory cannot be written directly", "writePath", string(d.opts.Path), "error", err.Error())
			} else {
				d.opts.Log.Info("imports write blobs directly into the content store", "writePath", string(d.opts.Path), "contentRoot", root)
			}
		}
	}
	if d.err != nil && d.opts.Path == WriteDirect {
		return "", fmt.Errorf("--write-path=direct: %w", d.err)
	}
	return d.root, nil
}

// sameFS refuses two directories on different filesystems: a link between
// them is not possible.
func sameFS(a, b string) error {
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		return fmt.Errorf("statting %s: %w", a, err)
	}
	if err := unix.Stat(b, &sb); err != nil {
		return fmt.Errorf("statting %s: %w", b, err)
	}
	if sa.Dev != sb.Dev {
		return fmt.Errorf("%s and %s are on different filesystems", a, b)
	}
	return nil
}

// sweepTemp removes the temp files nobody writes any more: a writer holds a
// lock on its file until it is done, and a crashed one holds none. reap
// deals with a file first if it is a journal of linked blobs.
func sweepTemp(dir string, reap func(path string) bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reading %s: %w", dir, err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if reap != nil && reap(p) {
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			continue // gone already
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			_ = os.Remove(p)
		}
		_ = f.Close()
	}
	return nil
}

// sweep removes the temp files a killed writer left, on every pass: a pass
// that imports nothing (its archives unchanged) must not leave them.
func (d *directWriter) sweep(ctx context.Context, r *Runtime) error {
	root, err := d.rootFor(ctx, r)
	if root == "" || err != nil {
		return nil // streaming: nothing is written there
	}
	return sweepTemp(filepath.Join(root, tempDirName), func(p string) bool { return r.reapJournal(ctx, root, p) })
}

// fallBack logs, once, that a blob is streamed after all.
func (d *directWriter) fallBack(what string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fellBack || d.opts.Log == nil {
		return
	}
	d.fellBack = true
	d.opts.Log.Debug("a blob is streamed instead of written directly", "doing", what, "error", err.Error())
}

// maxPending bounds the verified temp files an import holds open until the
// end of its walk; blobs past it are committed one by one.
const maxPending = 256

// placeBlob writes one blob into a temp file beside the content store's
// blobs and verifies it. Up to maxPending blobs are held there for
// commitPending; others are made durable, linked into place and recorded by
// containerd, under the lease of ctx, by metadata alone, at once. It reports
// whether it consumed r: when it did not, the caller streams r.
func (w *ingester) placeBlob(ctx context.Context, root string, expected digest.Digest, size int64, r io.Reader) (d digest.Digest, consumed bool, err error) {
	alg := digest.Canonical
	if expected != "" {
		if err := expected.Validate(); err != nil {
			return "", false, nil // the stream path reports it
		}
		alg = expected.Algorithm()
		// A file another namespace committed is there already: the stream
		// path commits it by metadata without reading r.
		if fi, err := os.Stat(filepath.Join(root, "blobs", alg.String(), expected.Encoded())); err == nil && fi.Size() == size {
			return "", false, nil
		}
	}
	f, err := os.CreateTemp(filepath.Join(root, tempDirName), "blob-")
	if err != nil {
		w.r.direct.fallBack("creating a temp file", err)
		return "", false, nil
	}
	held := false
	defer func() {
		if !held {
			_ = os.Remove(f.Name())
			_ = f.Close()
		}
	}()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		w.r.direct.fallBack("locking "+f.Name(), err)
		return "", false, nil
	}

	// From here on r is consumed: errors are the import's.
	desc := ocispec.Descriptor{Digest: expected, Size: size}
	digester := alg.Digester()
	n, err := copyHashed(newDIOFile(f), digester.Hash(), r)
	if err != nil {
		return "", true, fmt.Errorf("writing %s to %s: %w", blobName(desc), f.Name(), err)
	}
	if n != size {
		return "", true, fmt.Errorf("writing %s: got %d bytes, want %d", blobName(desc), n, size)
	}
	d = digester.Digest()
	if expected != "" && d != expected {
		return "", true, fmt.Errorf("writing %s: its bytes have digest %s", expected, d)
	}
	// Read-only, as containerd leaves the blobs it commits.
	if err := f.Chmod(0o444); err != nil {
		return "", true, fmt.Errorf("setting the mode of %s: %w", f.Name(), err)
	}
	desc.Digest = d
	var dup bool
	if held, dup = w.hold(d, f); held || dup {
		return d, true, nil
	}
	if err := f.Sync(); err != nil {
		return "", true, fmt.Errorf("syncing %s: %w", f.Name(), err)
	}
	d, _, err = w.linkPlaced(ctx, root, desc, f, nil)
	return d, true, err
}

// hold keeps a verified temp file for commitPending: held. A blob held
// already needs nothing more: dup. Neither when the batch is full.
func (w *ingester) hold(d digest.Digest, f *os.File) (held, dup bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.pending[d]; ok {
		return false, true
	}
	if len(w.pending) >= maxPending {
		return false, false
	}
	w.pending[d] = f
	return true, false
}

// readPending reads a held blob: the walk's documents may be read before
// they are committed. ok is false when d is not held.
func (w *ingester) readPending(d digest.Digest) (data []byte, ok bool, err error) {
	w.mu.Lock()
	f := w.pending[d]
	w.mu.Unlock()
	if f == nil {
		return nil, false, nil
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, true, fmt.Errorf("reading %s from %s: %w", d, f.Name(), err)
	}
	data = make([]byte, fi.Size())
	if _, err := f.ReadAt(data, 0); err != nil {
		return nil, true, fmt.Errorf("reading %s from %s: %w", d, f.Name(), err)
	}
	return data, true, nil
}

// pendingParallel is how many held blobs are synced, and committed, at once.
const pendingParallel = 8

// commitPending makes every held blob durable, all at once so that the
// filesystem's journal commits them together, links each into place and has
// containerd record it under the lease of ctx, by metadata alone, with its
// distribution source labels. It returns the blobs it committed, which carry
// those labels.
func (w *ingester) commitPending(ctx context.Context, sources sourceLabels) (map[digest.Digest]bool, error) {
	labelled := map[digest.Digest]bool{}
	w.mu.Lock()
	held := w.pending
	w.pending = map[digest.Digest]*os.File{}
	w.mu.Unlock()
	if len(held) == 0 {
		return labelled, nil
	}
	defer func() {
		for _, f := range held {
			_ = os.Remove(f.Name())
			_ = f.Close()
		}
	}()
	root, err := w.r.direct.rootFor(ctx, w.r)
	if err != nil {
		return nil, err
	}
	var g errgroup.Group
	g.SetLimit(pendingParallel)
	for _, f := range held {
		g.Go(func() error {
			if err := f.Sync(); err != nil {
				return fmt.Errorf("syncing %s: %w", f.Name(), err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	// Journal every link first, durably, then link, then make the links
	// durable, then have containerd record the blobs.
	j, err := w.journalLinks(root)
	if err != nil {
		return nil, err
	}
	inodes := map[digest.Digest]uint64{}
	for d, f := range held {
		if inodes[d], err = inodeOf(f); err != nil {
			return nil, err
		}
	}
	if err := j.record(inodes); err != nil {
		return nil, err
	}
	// Each blob is then linked, the link made durable (containerd syncs the
	// blobs directory when it commits a blob it wrote; one holdfast linked is
	// committed by metadata alone) and committed at once: a blob linked and
	// not yet committed is a file containerd's GC may sweep (on 1.6 a GC runs
	// every hundred changes), and its commit then streams it after all.
	blobsDir := filepath.Join(root, "blobs", digest.Canonical.String())
	var mu sync.Mutex
	for d, f := range held {
		g.Go(func() error {
			fi, err := f.Stat()
			if err != nil {
				return fmt.Errorf("statting %s: %w", f.Name(), err)
			}
			desc := ocispec.Descriptor{Digest: d, Size: fi.Size()}
			var committed bool
			if lerr := w.link(root, d, f.Name(), inodes[d], j); lerr != nil {
				w.r.direct.fallBack("linking "+d.String(), lerr)
				_, committed, err = w.streamPlaced(ctx, desc, f, sources.labelsOf(d))
			} else if err = files.SyncDir(blobsDir); err == nil {
				_, committed, err = w.commitLinked(ctx, desc, f, sources.labelsOf(d))
			}
			if committed {
				mu.Lock()
				labelled[d] = true
				mu.Unlock()
			}
			return err
		})
	}
	return labelled, g.Wait()
}

// dropPending removes the temp files of blobs still held: the import ended
// before commitPending.
func (w *ingester) dropPending() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for d, f := range w.pending {
		_ = os.Remove(f.Name())
		_ = f.Close()
		delete(w.pending, d)
	}
}

// linkPlaced links a durable, verified temp file into the store under its
// digest, journalled (see linkedPrefix) and made durable, and has containerd
// record it (commitPlaced); fresh labels go on it when this commits it.
func (w *ingester) linkPlaced(ctx context.Context, root string, desc ocispec.Descriptor, f *os.File, fresh map[string]string) (digest.Digest, bool, error) {
	j, err := w.journalLinks(root)
	if err != nil {
		return "", false, err
	}
	ino, err := inodeOf(f)
	if err != nil {
		return "", false, err
	}
	if err := j.record(map[digest.Digest]uint64{desc.Digest: ino}); err != nil {
		return "", false, err
	}
	if err := w.link(root, desc.Digest, f.Name(), ino, j); err != nil {
		w.r.direct.fallBack("linking "+desc.Digest.String(), err)
		return w.streamPlaced(ctx, desc, f, fresh)
	}
	if err := files.SyncDir(filepath.Join(root, "blobs", desc.Digest.Algorithm().String())); err != nil {
		return "", false, err
	}
	return w.commitLinked(ctx, desc, f, fresh)
}

// link links the temp file name of d (inode ino) into the store. A blob already
// there is kept, and this import's file is not linked: nil either way.
func (w *ingester) link(root string, d digest.Digest, name string, ino uint64, j *linkJournal) error {
	target := filepath.Join(root, "blobs", d.Algorithm().String(), d.Encoded())
	err := os.Link(name, target)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err == nil {
		j.linked(d, ino)
	}
	return err
}

// commitLinked has containerd record a blob whose file is in place, even if
// the import is being cancelled (another blob failed, or a shutdown), so
// that it is the lease's to keep or let go; what is not recorded in the end
// is removed by closeLinks.
func (w *ingester) commitLinked(ctx context.Context, desc ocispec.Descriptor, f *os.File, fresh map[string]string) (digest.Digest, bool, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
	defer cancel()
	return w.commitPlaced(cctx, desc, f, fresh)
}

// commitPlaced has containerd record a blob whose file is in place. A store
// that wants the bytes after all (another policy, another directory, or the
// file was collected before the writer saw it) gets them from f.
func (w *ingester) commitPlaced(ctx context.Context, desc ocispec.Descriptor, f *os.File, fresh map[string]string) (digest.Digest, bool, error) {
	ref := w.nextRef()
	cw, offset, err := w.r.openBlob(ctx, ref, desc)
	if err != nil {
		w.done(ref, "", false)
		if errdefs.IsAlreadyExists(err) {
			return desc.Digest, false, nil
		}
		return "", false, fmt.Errorf("opening writer for %s: %w", desc.Digest, err)
	}
	if offset != desc.Size {
		cw.Close()
		_ = w.r.client.ContentStore().Abort(ctx, ref)
		w.done(ref, "", false)
		w.mu.Lock()
		w.restreamed++
		w.mu.Unlock()
		w.r.direct.fallBack("committing "+desc.Digest.String(), fmt.Errorf("the store wants its bytes (it has %d of %d)", offset, desc.Size))
		return w.streamPlaced(ctx, desc, f, fresh)
	}
	defer cw.Close()
	d, committed, err := w.commit(ctx, cw, ref, desc.Digest, desc.Size, nil, fresh)
	if err == nil && committed {
		w.mu.Lock()
		w.direct++
		w.written++
		w.mu.Unlock()
	}
	return d, committed, err
}

// streamPlaced streams a verified blob from its temp file.
func (w *ingester) streamPlaced(ctx context.Context, desc ocispec.Descriptor, f *os.File, fresh map[string]string) (digest.Digest, bool, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", false, fmt.Errorf("rewinding %s: %w", f.Name(), err)
	}
	d, committed, err := w.put(ctx, desc, f, nil, fresh)
	if err == nil && committed {
		w.mu.Lock()
		w.written++
		w.mu.Unlock()
	}
	return d, committed, err
}

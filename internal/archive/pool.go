package archive

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/errgroup"

	"github.com/holdfast-project/holdfast/internal/files"
)

// reopener reads the bytes of an entry again, from skip on, when the walker
// defers its write: from another goroutine, after the pass over the archive.
type reopener func(skip int64) (io.ReadCloser, error)

// sectionOpener reopens size bytes at offset off of ra.
func sectionOpener(ra io.ReaderAt, off, size int64) reopener {
	return func(skip int64) (io.ReadCloser, error) {
		return io.NopCloser(io.NewSectionReader(ra, off+skip, size-skip)), nil
	}
}

// rootOpener reopens a file under root (see files.OpenIn).
func rootOpener(root *os.Root, name string) reopener {
	return func(skip int64) (io.ReadCloser, error) {
		f, err := files.OpenIn(root, name)
		if err != nil {
			return nil, err
		}
		if skip > 0 {
			if _, err := f.Seek(skip, io.SeekStart); err != nil {
				f.Close()
				return nil, err
			}
		}
		return f, nil
	}
}

// blobJob is one deferred write.
type blobJob struct {
	name  string        // entry name, for errors
	dgst  digest.Digest // expected digest; empty: the store computes it
	size  int64
	check bool     // ask the store first, and write only if it lacks the blob
	head  []byte   // the first bytes of the blob, read already
	rest  reopener // the bytes after head; nil when head holds them all
	fi    *fileInfo

	got  digest.Digest // what the store returned
	read int64         // bytes read through rest
}

// queue defers a write to the pool. A blob of known digest is in Blobs from
// now on, as it would be once written (or found present) in a single pass.
func (w *walker) queue(j *blobJob) {
	if j.dgst != "" {
		w.blobs[j.dgst] = j.size
	}
	w.jobs = append(w.jobs, j)
}

// putHeld writes a file held in memory (a small docker save layer), or queues
// the write when writes are deferred.
func (w *walker) putHeld(ctx context.Context, name string, fi *fileInfo) error {
	if w.deferred {
		w.queue(&blobJob{name: name, dgst: fi.dgst, size: fi.size, head: fi.data})
		return nil
	}
	return w.put(ctx, name, fi.dgst, fi.size, bytes.NewReader(fi.data))
}

// queueHeldLayers queues the small layers of a docker save archive that are
// held in memory, so that they are written by the same pool as the other
// blobs instead of after them. They are the ones synthesize would write: in
// a docker save archive (no index.json) it makes every manifest.json image.
// Anything wrong in manifest.json is left to finish to report.
func (w *walker) queueHeldLayers() {
	if _, ok := w.meta[nameIndexJSON]; ok {
		return
	}
	var entries []dockerImage
	if json.Unmarshal(w.meta[nameManifestJSON], &entries) != nil || len(entries) > w.lim.indexItems {
		return
	}
	for _, e := range entries {
		if len(e.Layers) > w.lim.indexItems {
			return
		}
		for _, p := range e.Layers {
			fi := w.lookup(p)
			if fi == nil || fi.named || fi.stored {
				continue
			}
			if _, ok := layerMediaType(fi.comp); !ok {
				continue
			}
			if _, ok := w.blobs[fi.dgst]; ok {
				continue
			}
			// synthesize finds it in Blobs and does not write it again.
			w.queue(&blobJob{name: cleanName(p), dgst: fi.dgst, size: fi.size, head: fi.data})
		}
	}
}

// runJobs writes the queued blobs, the largest first, w.concurrency at a time.
// The first error cancels the others; every write has returned when it
// returns.
func (w *walker) runJobs(ctx context.Context) error {
	jobs := w.jobs
	w.jobs = nil
	if len(jobs) == 0 {
		return nil
	}
	if rs, ok := w.st.(Reserver); ok {
		var err error
		if jobs, err = reserve(ctx, rs, w.st, jobs); err != nil {
			return err
		}
		if len(jobs) == 0 {
			return nil
		}
	}
	slices.SortStableFunc(jobs, func(a, b *blobJob) int { return cmp.Compare(b.size, a.size) })
	g, gctx := errgroup.WithContext(ctx)
	workers := min(w.concurrency, len(jobs))
	gate := newStagger(workers, jobs[0].size)
	var next atomic.Int64
	for k := range workers {
		g.Go(func() error {
			defer gate.openAll() // no more bytes will come from this worker
			if err := gate.wait(gctx, k); err != nil {
				return err
			}
			for {
				i := next.Add(1) - 1
				if i >= int64(len(jobs)) {
					return nil
				}
				if err := gctx.Err(); err != nil {
					return err
				}
				if err := runJob(gctx, w.st, jobs[i], gate); err != nil {
					return err
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, j := range jobs {
		w.jobRead += j.read
		if j.fi != nil {
			j.fi.dgst = j.got
			w.blobs[j.got] = j.size
		}
	}
	return nil
}

// reserve asks the store which queued blobs of known digest it holds already,
// drops those jobs (a write of them would find them present), and tells the store the bytes the others
// will write before any is written. The jobs left are returned.
func reserve(ctx context.Context, rs Reserver, st Store, jobs []*blobJob) ([]*blobJob, error) {
	left := make([]*blobJob, 0, len(jobs))
	var blobs int
	var bytes int64
	for _, j := range jobs {
		if j.dgst != "" {
			has, err := st.Has(ctx, j.dgst)
			if err != nil {
				return nil, fmt.Errorf("checking %s: %w", j.dgst, err)
			}
			if has {
				continue
			}
			j.check = false
		}
		left = append(left, j)
		blobs++
		bytes += j.size
	}
	if blobs == 0 {
		return left, nil
	}
	return left, rs.Reserve(ctx, blobs, bytes)
}

// runJob does one write. It touches nothing of the walker's but j, so that
// jobs can run concurrently.
func runJob(ctx context.Context, st Store, j *blobJob, progress *stagger) error {
	if j.check {
		has, err := st.Has(ctx, j.dgst)
		if err != nil {
			return fmt.Errorf("checking %s: %w", j.dgst, err)
		}
		if has {
			progress.add(j.size) // as far along as if it had been written
			return nil
		}
	}
	var r io.Reader = bytes.NewReader(j.head)
	if j.rest != nil {
		rc, err := j.rest(int64(len(j.head)))
		if err != nil {
			return fmt.Errorf("reading %s: %w", j.name, err)
		}
		defer rc.Close()
		cr := &countingReader{r: rc}
		defer func() { j.read = cr.n }()
		r = &joinReader{head: j.head, rest: cr}
	}
	got, err := st.Put(ctx, j.dgst, j.size, &ctxReader{ctx: ctx, r: r, progress: progress})
	if err != nil {
		return fmt.Errorf("writing %s: %w", j.name, err)
	}
	if j.dgst == "" {
		if err := got.Validate(); err != nil {
			return fmt.Errorf("writing %s: store returned digest %q: %w", j.name, got, err)
		}
	} else if got != "" && got != j.dgst {
		return fmt.Errorf("writing %s: store computed digest %s, expected %s", j.name, got, j.dgst)
	}
	j.got = got
	return nil
}

// joinReader reads head, then rest, filling each read from both where it
// spans them: the store sees reads of the size it asks for from the start.
type joinReader struct {
	head []byte
	rest io.Reader
}

func (r *joinReader) Read(p []byte) (int, error) {
	n := copy(p, r.head)
	r.head = r.head[n:]
	if n == len(p) {
		return n, nil
	}
	m, err := r.rest.Read(p[n:])
	if n > 0 && err == io.EOF {
		err = nil // report it on the next read, with no bytes
	}
	return n + m, err
}

// ctxReader stops reading once ctx is done, so that a write another worker's
// error cancelled stops even if the store does not watch ctx.
type ctxReader struct {
	ctx      context.Context
	r        io.Reader
	progress *stagger // counts the bytes read, if set
}

func (r *ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := r.r.Read(p)
	if r.progress != nil {
		r.progress.add(int64(n))
	}
	return n, err
}

// minStagger is the smallest largest-blob size worth staggering writers for.
const minStagger = 16 << 20

// stagger starts the writers of large blobs one after another instead of all
// at once: worker k begins once the workers before it have streamed k steps
// of bytes, a step being the largest blob's size divided by the number of
// workers. containerd syncs each blob to disk when it is committed, and the
// kernel writes little back before that (its background threshold is a share
// of memory), so writers that started together commit together and stall
// together for the disk, then compete together for the CPU. Staggered, one
// writer's commit overlaps the others' streaming.
type stagger struct {
	step  int64
	bytes atomic.Int64
	mu    sync.Mutex
	gates []chan struct{} // gates[k] opens when worker k+1 may start
	open  int             // gates opened so far
}

func newStagger(workers int, largest int64) *stagger {
	s := &stagger{step: largest / int64(max(workers, 1))}
	for range workers - 1 {
		s.gates = append(s.gates, make(chan struct{}))
	}
	if largest < minStagger {
		s.openAll()
	}
	return s
}

// add counts n more bytes streamed and opens the gates they reach.
func (s *stagger) add(n int64) {
	if s == nil || s.step <= 0 || n <= 0 {
		return
	}
	reached := s.bytes.Add(n) / s.step
	s.mu.Lock()
	for s.open < len(s.gates) && int64(s.open) < reached {
		close(s.gates[s.open])
		s.open++
	}
	s.mu.Unlock()
}

// openAll lets every worker start.
func (s *stagger) openAll() {
	s.mu.Lock()
	for ; s.open < len(s.gates); s.open++ {
		close(s.gates[s.open])
	}
	s.mu.Unlock()
}

// wait holds worker k until it may start.
func (s *stagger) wait(ctx context.Context, k int) error {
	if k == 0 {
		return nil
	}
	select {
	case <-s.gates[k-1]:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

package containerd

import (
	"errors"
	"hash"
	"io"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dioFile writes a blob's temp file with O_DIRECT where its filesystem takes
// it: the bytes go from holdfast's buffer to the disk without being copied
// into the page cache. On a VM that copy into freshly allocated page cache is
// most of the CPU an import costs, and an import of gigabytes would otherwise
// evict the running pods' cached files. Writes that do not meet the
// filesystem's alignment (the tail of a blob) are buffered; the caller still
// syncs the file, which makes both durable.
type dioFile struct {
	f      *os.File
	align  int  // offset and memory alignment of direct writes
	direct bool // O_DIRECT is set on f
	off    int64
}

// newDIOFile turns on O_DIRECT on f when its filesystem reports how direct
// I/O must be aligned (statx STATX_DIOALIGN), and leaves f buffered
// otherwise.
func newDIOFile(f *os.File) *dioFile {
	w := &dioFile{f: f}
	var st unix.Statx_t
	if err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &st); err != nil || st.Mask&unix.STATX_DIOALIGN == 0 {
		return w
	}
	align := int(max(st.Dio_mem_align, st.Dio_offset_align))
	if align == 0 || align > writeChunk || writeChunk%align != 0 {
		return w
	}
	flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil {
		return w
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_SETFL, flags|unix.O_DIRECT); err != nil {
		return w
	}
	w.align, w.direct = align, true
	return w
}

// Write writes p at the file's end: its aligned part directly, the rest
// buffered (after which the file stays buffered).
func (w *dioFile) Write(p []byte) (int, error) {
	written := 0
	if w.direct {
		n := len(p) - len(p)%w.align
		if n > 0 && uintptr(unsafe.Pointer(&p[0]))%uintptr(w.align) == 0 && w.off%int64(w.align) == 0 {
			m, err := w.f.Write(p[:n])
			written += m
			w.off += int64(m)
			if err != nil && !(m == 0 && errors.Is(err, unix.EINVAL)) {
				return written, err
			}
			// EINVAL before a byte was written: the filesystem refuses
			// this write after all; it is buffered below.
		}
		if written < len(p) {
			if err := w.buffered(); err != nil {
				return written, err
			}
		}
	}
	if written == len(p) {
		return written, nil
	}
	m, err := w.f.Write(p[written:])
	w.off += int64(m)
	return written + m, err
}

// buffered turns O_DIRECT off.
func (w *dioFile) buffered() error {
	flags, err := unix.FcntlInt(w.f.Fd(), unix.F_GETFL, 0)
	if err == nil {
		_, err = unix.FcntlInt(w.f.Fd(), unix.F_SETFL, flags&^unix.O_DIRECT)
	}
	if err != nil {
		return &os.PathError{Op: "fcntl", Path: w.f.Name(), Err: err}
	}
	w.direct = false
	return nil
}

// copyHashed copies src to dst in full chunks, hashing each, with the write
// of one chunk overlapping the read and hash of the next: a direct write
// waits for the disk, and the decoder and the hash need not wait with it.
func copyHashed(dst io.Writer, h hash.Hash, src io.Reader) (int64, error) {
	type chunk struct {
		bufp *[]byte
		n    int
	}
	full := make(chan chunk, 1)
	free := make(chan *[]byte, 2)
	for range 2 {
		free <- chunkPool.Get().(*[]byte)
	}
	werr := make(chan error, 1)
	var failed atomic.Bool
	go func() {
		var err error
		for c := range full {
			if err == nil {
				if _, err = dst.Write((*c.bufp)[:c.n]); err != nil {
					failed.Store(true)
				}
			}
			free <- c.bufp
		}
		werr <- err
	}()
	var total int64
	var rerr error
	for {
		bufp := <-free
		n, err := io.ReadFull(src, *bufp)
		if n > 0 {
			h.Write((*bufp)[:n])
			total += int64(n)
			full <- chunk{bufp, n}
		} else {
			free <- bufp
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			rerr = err
			break
		}
		if failed.Load() {
			break // the write's error is returned
		}
	}
	close(full)
	err := <-werr
	for range 2 {
		chunkPool.Put(<-free)
	}
	if rerr != nil {
		return total, rerr
	}
	return total, err
}

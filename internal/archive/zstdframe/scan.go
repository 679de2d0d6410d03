package zstdframe

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"github.com/klauspost/compress/zstd"

	"github.com/holdfast-project/holdfast/internal/units"
)

// The frame scanner of Reader: it cuts a zstd stream at frame
// boundaries by reading frame headers and block headers (RFC 8878, 3.1.1),
// never decoding.

// scan reads the next unit into u: skippable frames are read past (a seek
// table and a pzstd size frame are kept to be checked), a frame is walked
// block by block and buffered. It reports false at the clean end of the
// stream.
//
// Before the pipeline starts, a first frame larger than frameCompCap is
// returned as it is (size 0, what was read of it in comp). Once it runs, a
// frame of any size after the cap is handed on at once and fed to the reader
// through a pipe as it is walked.
func (z *Reader) scan(u *unit) (bool, error) {
	u.kind, u.err, u.stream, u.pipe, u.scanErr = frameUnit, nil, false, nil, nil
	u.size, u.sum, u.hasSum, u.bound, u.over = 0, 0, false, 0, false
	u.comp, u.out = u.comp[:0], u.out[:0]
	u.done = make(chan struct{})
	if err := z.pending; err != nil {
		z.pending = nil
		return false, err
	}
	var hdr [18]byte
	for {
		u.off = z.off
		n, err := io.ReadFull(z.r, hdr[:4])
		z.off += int64(n)
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, frameErr(u.off, readErr(err))
		}
		magic := binary.LittleEndian.Uint32(hdr[:4])
		if magic&0xfffffff0 == 0x184D2A50 {
			table, err := z.skippable(magic, u.off)
			if err != nil {
				return false, err
			}
			if table != nil {
				u.kind, u.table = tableUnit, *table
				return true, nil
			}
			continue
		}
		if magic != 0xfd2fb528 {
			return false, frameErr(u.off, zstd.ErrMagicMismatch)
		}
		break
	}
	return true, z.frame(u, hdr[:])
}

// readErr is a read error, the end of the stream being a truncation.
func readErr(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readN reads len(b) bytes of the stream.
func (z *Reader) readN(b []byte) error {
	n, err := io.ReadFull(z.r, b)
	z.off += int64(n)
	if err != nil {
		return readErr(err)
	}
	return nil
}

// skippable reads past a skippable frame whose magic was read at off: a seek
// table is returned, a pzstd size frame is kept for the frame that follows.
func (z *Reader) skippable(magic uint32, off int64) (*Table, error) {
	var b [4]byte
	if err := z.readN(b[:]); err != nil {
		return nil, frameErr(off, err)
	}
	size := binary.LittleEndian.Uint32(b[:])
	z.marker = sizeMark{}
	var err error
	switch {
	case magic == pzstdMagic && size == 4:
		if err = z.readN(b[:]); err == nil {
			z.marker = sizeMark{ok: true, off: off, size: binary.LittleEndian.Uint32(b[:])}
		}
	case magic == tableMagic && size <= tableCap:
		p := make([]byte, size)
		if err = z.readN(p); err == nil {
			t, perr := parseTable(p)
			if perr == nil {
				return &t, nil
			}
			if perr != errNotTable {
				return nil, &Error{msg: fmt.Sprintf("zstd: the seek table at offset %d", off), err: perr}
			}
		}
	case magic == tableMagic:
		// Too large to keep: read its footer only, to check the count.
		if err = z.discard(int64(size) - footerSize); err == nil {
			var foot [footerSize]byte
			if err = z.readN(foot[:]); err == nil {
				t, perr := parseFooter(foot[:])
				if perr == nil {
					return &t, nil
				}
			}
		}
	default:
		err = z.discard(int64(size))
	}
	if err != nil {
		return nil, frameErr(off, err)
	}
	return nil, nil
}

func (z *Reader) discard(n int64) error {
	k, err := io.CopyN(io.Discard, z.r, n)
	z.off += k
	if err != nil {
		return readErr(err)
	}
	return nil
}

// frame walks the frame whose magic is in hdr[:4] (18 bytes, the largest
// header): its header, checked as the decoder will, then its blocks and
// checksum, into u.comp or, past the cap, through a pipe.
func (z *Reader) frame(u *unit, hdr []byte) error {
	u.index = z.frames
	z.frames++
	marker := z.marker
	z.marker = sizeMark{}
	fh, err := z.frameHeader(u, hdr)
	if err != nil {
		return err
	}
	if !z.started && fh.HasFCS && fh.FrameContentSize > frameDecCap {
		// A first frame that says it is too large to decode whole (the
		// zstd CLI writes its content size): the whole stream is decoded
		// as one, without buffering the frame first.
		u.over = true
		return nil
	}
	// The frame's buffer grows to what the frame can be (see put): its
	// size when pzstd's size frame says it, else at most zstd's bound for
	// the content size it declares.
	w := blockWalk{z: z, u: u, window: window(&fh), most: frameCompCap}
	switch {
	case marker.ok:
		w.most = min(int(marker.size), frameCompCap)
		if w.most > cap(u.comp) {
			u.comp = slices.Grow(u.comp, w.most-len(u.comp))
		}
	case fh.HasFCS:
		c := int(min(fh.FrameContentSize, frameCompCap))
		w.most = min(c+c>>8+1<<10, frameCompCap)
	}
	bound, err := w.blocks()
	if err != nil || u.over {
		return err
	}
	u.size = z.off - u.off
	if fh.HasFCS {
		bound = min(bound, fh.FrameContentSize)
	}
	if marker.ok && int64(marker.size) != u.size {
		z.pending = markerErr("zstd: the pzstd size frame at offset %d says frame %d (at offset %d) is %d bytes compressed, it is %d", marker.off, u.index, u.off, marker.size, u.size)
	}
	if w.pw != nil {
		w.pw.Close()
		return nil
	}
	if bound > frameDecCap {
		u.stream = true
	} else {
		u.bound = int(bound)
	}
	return nil
}

// frameHeader reads the rest of a frame header into hdr and u.comp, a byte
// at a time after the magic until zstd.Header decodes it whole, and refuses
// a window over the limit.
func (z *Reader) frameHeader(u *unit, hdr []byte) (zstd.Header, error) {
	var h zstd.Header
	n := 4
	for {
		err := h.Decode(hdr[:n])
		if err == nil {
			break
		}
		if err != io.ErrUnexpectedEOF || n == len(hdr) {
			return h, frameErr(u.off, err)
		}
		if err := z.readN(hdr[n : n+1]); err != nil {
			return h, frameErr(u.off, err)
		}
		n++
	}
	u.hasSum = h.HasCheckSum
	if w := window(&h); w > z.limit {
		return h, &Error{msg: fmt.Sprintf("zstd: the frame at offset %d declares a %s window, more than the %s holdfast decodes%s", u.off, units.Whole(w), units.Whole(z.limit), hint)}
	}
	u.comp = append(u.comp, hdr[:n]...)
	return h, nil
}

// blockWalk walks the blocks of one frame.
type blockWalk struct {
	z      *Reader
	u      *unit
	window uint64
	most   int            // the most the frame is expected to take, to grow its buffer to
	pw     *io.PipeWriter // once the frame is past the cap and handed on
}

// blocks reads the frame's blocks and checksum, and returns the most its
// content can be: raw and RLE blocks say their size, a compressed block is
// at most min(window, 128 KiB).
func (w *blockWalk) blocks() (uint64, error) {
	z, u := w.z, w.u
	bound := uint64(0)
	for last := false; !last; {
		var bh [3]byte
		if err := z.readN(bh[:]); err != nil {
			return 0, w.fail(err)
		}
		v := uint32(bh[0]) | uint32(bh[1])<<8 | uint32(bh[2])<<16
		last = v&1 != 0
		size := int(v >> 3)
		content := size
		switch (v >> 1) & 3 {
		case 0: // raw
			bound += uint64(size)
		case 1: // RLE: one byte, size times
			content = 1
			bound += uint64(size)
		case 2:
			bound += min(w.window, maxBlock)
		case 3:
			return 0, w.fail(zstd.ErrReservedBlockType)
		}
		if size > maxBlock {
			return 0, w.fail(zstd.ErrCompressedSizeTooBig)
		}
		if w.pw == nil && len(u.comp)+len(bh)+content > frameCompCap {
			if !z.started {
				// The first frame: the whole stream is decoded as one.
				u.comp = append(u.comp, bh[:]...)
				u.over = true
				return 0, nil
			}
			if err := w.handOn(); err != nil {
				return 0, err
			}
		}
		if err := w.write(bh[:]); err != nil {
			return 0, err
		}
		if err := w.put(content); err != nil {
			return 0, w.fail(err)
		}
	}
	if u.hasSum {
		var s [4]byte
		if err := z.readN(s[:]); err != nil {
			return 0, w.fail(err)
		}
		u.sum = binary.LittleEndian.Uint32(s[:])
		if err := w.write(s[:]); err != nil {
			return 0, err
		}
	}
	return bound, nil
}

// handOn hands the frame on to the reader before it is walked whole, to be
// decoded from a pipe that the rest of the walk feeds.
func (w *blockWalk) handOn() error {
	pr, pw := io.Pipe()
	w.u.pipe, w.u.stream, w.pw = pr, true, pw
	close(w.u.done)
	select {
	case w.z.order <- w.u:
	case <-w.z.stop:
		return errClosed
	}
	_, err := pw.Write(w.u.comp)
	return err
}

// write passes on bytes the walk has read.
func (w *blockWalk) write(b []byte) error {
	if w.pw == nil {
		w.u.comp = append(w.u.comp, b...)
		return nil
	}
	_, err := w.pw.Write(b)
	return err
}

// put passes on the next n bytes of the stream.
func (w *blockWalk) put(n int) error {
	z, u := w.z, w.u
	if w.pw == nil {
		start := len(u.comp)
		if start+n > cap(u.comp) {
			// Doubled, up to what the frame can take, rather than by
			// append's quarters: a buffer growing to 8 MiB is copied a few
			// times, not a dozen.
			b := make([]byte, start, max(min(2*cap(u.comp), w.most), start+n))
			copy(b, u.comp)
			u.comp = b
		}
		u.comp = u.comp[:start+n]
		return z.readN(u.comp[start:])
	}
	if z.copyBuf == nil {
		z.copyBuf = make([]byte, 64<<10)
	}
	k, err := io.CopyBuffer(w.pw, io.LimitReader(z.r, int64(n)), z.copyBuf)
	z.off += k
	if err == nil && k < int64(n) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// fail is the walk's error about the frame; a reader of its pipe gets it.
func (w *blockWalk) fail(err error) error {
	err = frameErr(w.u.off, err)
	if w.pw != nil {
		w.u.mu.Lock()
		w.u.scanErr = err
		w.u.mu.Unlock()
		w.pw.CloseWithError(err)
	}
	return err
}

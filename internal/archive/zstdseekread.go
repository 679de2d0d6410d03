package archive

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
)

// A zstd file that ends with a seek table (what SeekableZstdWriter, so
// holdfast export, writes) is seekable in its decoded bytes: the table says
// where each frame starts in the file and in the content. Read from a file,
// such an archive is walked as a plain tar is (see tarwalk.go): the tar
// reader reads headers through a seekZstdReader, which decodes the frame a
// header is in and seeks past entry data by the table, and each deferred
// blob write decodes the frames of its own blob. The blobs are so decoded
// and hashed side by side, on every core, instead of in order behind one
// stream; what no write read (blobs the store has, padding, what follows the
// archive) is decoded at the end (verify), so that every frame is checked
// as a stream would check it.
//
// The table is trusted only as far as the file bears it out, before a byte is
// decoded: it must be the file's only seek table, its frames must tile the
// file before it, each frame must start with a frame header whose window is
// within the limit and whose content size, when it has one, is the table's,
// and no frame may be larger than the stream decoder's workers take
// (zstdFrameCompCap, zstdFrameDecCap). A file that fails any of that is read
// as a stream (zstdframes.go), which says what is wrong with it. Each frame
// decoded must then give the content size the table says, and carry the
// checksum it says; errors use the stream's words.
type seekZstd struct {
	ra      io.ReaderAt
	size    int64 // of the file, the table included
	frames  []seekZstdFrame
	total   int64 // the decoded size
	dec     *zstd.Decoder
	checked []atomic.Bool // frames decoded and found as the table says
	mu      sync.Mutex
	err     error // the first decoding error
}

// seekZstdFrame is one frame, as the seek table places it.
type seekZstdFrame struct {
	off    int64 // where it starts in the file
	at     int64 // where its content starts in the decoded stream
	comp   uint32
	n      uint32 // its content size
	sum    uint32 // the table's checksum, if hasSum
	hasSum bool   // the table and the frame both carry one
}

// openSeekZstd reads the seek table at the end of ra (size bytes) and checks
// it against the frames' headers, as seekZstd says. It returns nil when ra
// is not read so, for whatever reason: the stream path reads it instead
// (and reports any read error itself).
func openSeekZstd(ra io.ReaderAt, size int64, limit uint64, workers int) *seekZstd {
	if size < 8+seekFooterSize {
		return nil
	}
	foot := make([]byte, seekFooterSize)
	if _, err := ra.ReadAt(foot, size-seekFooterSize); err != nil {
		return nil
	}
	t, err := parseSeekFooter(foot)
	if err != nil || t.count == 0 || t.count > zstdCheckedFrames {
		return nil
	}
	entry := uint64(seekEntrySize)
	if t.sums {
		entry = seekEntrySizeXXH
	}
	payload := t.count*entry + seekFooterSize
	tableAt := size - 8 - int64(payload)
	if tableAt < 0 {
		return nil
	}
	b := make([]byte, 8+payload)
	if _, err := ra.ReadAt(b, tableAt); err != nil {
		return nil
	}
	if binary.LittleEndian.Uint32(b) != seekTableMagic || uint64(binary.LittleEndian.Uint32(b[4:])) != payload {
		return nil
	}
	if t, err = parseSeekTable(b[8:]); err != nil {
		return nil
	}
	z := &seekZstd{ra: ra, size: size, frames: make([]seekZstdFrame, len(t.entries)), checked: make([]atomic.Bool, len(t.entries))}
	var off, at int64
	hdr := make([]byte, 18) // the largest frame header
	for i, e := range t.entries {
		if e.comp == 0 || e.comp > zstdFrameCompCap || e.dec > zstdFrameDecCap || off+int64(e.comp) > tableAt {
			return nil
		}
		h := hdr[:min(len(hdr), int(e.comp))]
		if _, err := ra.ReadAt(h, off); err != nil || len(h) < 5 || !bytes.Equal(h[:4], magicZstd) {
			return nil
		}
		n, err := zstdHeaderRest(h[4])
		if err != nil || 5+n > len(h) {
			return nil
		}
		fh := parseZstdFrameHeader(h[:5+n])
		if fh.window > limit || fh.hasFCS && fh.fcs != uint64(e.dec) {
			return nil
		}
		z.frames[i] = seekZstdFrame{off: off, at: at, comp: e.comp, n: e.dec, sum: e.sum, hasSum: t.sums && fh.hasSum}
		off += int64(e.comp)
		at += int64(e.dec)
	}
	if off != tableAt {
		return nil
	}
	z.total = at
	// The options are constants the decoder accepts. With no reader, it
	// starts no goroutine; DecodeAll decodes workers frames at once.
	z.dec, _ = zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(workers),
		zstd.WithDecoderMaxWindow(limit),
		zstd.WithDecodeAllCapLimit(true),
	)
	return z
}

// Err is the first decoding error, if any.
func (z *seekZstd) Err() error {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.err
}

func (z *seekZstd) fail(err error) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.err == nil {
		z.err = err
	}
	return err
}

// Close releases the decoder.
func (z *seekZstd) Close() {
	z.dec.Close()
}

// frameAt is the frame whose content holds decoded offset pos < z.total.
func (z *seekZstd) frameAt(pos int64) int {
	return sort.Search(len(z.frames), func(i int) bool {
		f := &z.frames[i]
		return f.at+int64(f.n) > pos
	})
}

// seekZstdBufs are a reader's buffers, reused from frame to frame.
type seekZstdBufs struct {
	comp, out []byte
}

// decode decodes frame i whole into b.out and checks it against the table.
func (z *seekZstd) decode(i int, b *seekZstdBufs) error {
	f := &z.frames[i]
	if cap(b.comp) < int(f.comp) {
		b.comp = make([]byte, f.comp)
	}
	b.comp = b.comp[:f.comp]
	if _, err := z.ra.ReadAt(b.comp, f.off); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return z.fail(frameErr(f.off, err))
	}
	if cap(b.out) < int(f.n) {
		b.out = make([]byte, 0, f.n)
	}
	// The buffer's capacity is the content the table says: DecodeAll
	// decodes no more (WithDecodeAllCapLimit).
	out, err := z.dec.DecodeAll(b.comp, b.out[:0:f.n])
	switch {
	case errors.Is(err, zstd.ErrDecoderSizeExceeded):
		err = z.tooLarge(i, b.comp)
	case err != nil:
		err = frameErr(f.off, err)
	case len(out) != int(f.n):
		err = tableSizeErr(i, f.off, f.n, len(out))
	case f.hasSum && binary.LittleEndian.Uint32(b.comp[len(b.comp)-4:]) != f.sum:
		err = tableSumErr(i, f.off, f.sum, binary.LittleEndian.Uint32(b.comp[len(b.comp)-4:]))
	}
	if err != nil {
		return z.fail(err)
	}
	b.out = out
	z.checked[i].Store(true)
	return nil
}

// tooLarge is the error of frame i, comp, which decodes to more than the
// table says: decoded again with room for what a frame decoded whole may be,
// it says how much more, as the stream would.
func (z *seekZstd) tooLarge(i int, comp []byte) error {
	f := &z.frames[i]
	out, err := z.dec.DecodeAll(comp, make([]byte, 0, zstdFrameDecCap))
	if err != nil {
		return tableSizeErr(i, f.off, f.n, "more")
	}
	return tableSizeErr(i, f.off, f.n, len(out))
}

// reader reads decoded bytes [start, end).
func (z *seekZstd) reader(start, end int64) *seekZstdReader {
	return &seekZstdReader{z: z, start: start, end: end, pos: start, cur: -1}
}

// seekZstdDeferFrames is how many frames an entry's data must touch for its
// write to be deferred. A deferred write decodes again the frames it starts
// and ends in (the walk decoded them to read the entry's first bytes and the
// next header): that is cheap beside a blob of many frames, and would decode
// a frame once per blob for blobs smaller than a frame (a layout of many small
// layers), which the walk reads in order instead.
const seekZstdDeferFrames = 4

// opener reopens size decoded bytes at offset off, for a deferred write, or
// is nil when they touch fewer than seekZstdDeferFrames frames.
func (z *seekZstd) opener(off, size int64) reopener {
	if size == 0 || off+size > z.total || z.frameAt(off+size-1)-z.frameAt(off)+1 < seekZstdDeferFrames {
		return nil
	}
	return func(skip int64) (io.ReadCloser, error) {
		return z.reader(off+skip, off+size), nil
	}
}

// verify decodes, workers at a time, every frame nothing decoded yet whose
// content starts before decoded offset below, and returns the first error.
func (z *seekZstd) verify(ctx context.Context, workers int, below int64) error {
	if err := z.Err(); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	var next atomic.Int64
	for range workers {
		g.Go(func() error {
			var b seekZstdBufs
			for {
				i := int(next.Add(1) - 1)
				if i >= len(z.frames) || z.frames[i].at >= below {
					return nil
				}
				if err := gctx.Err(); err != nil {
					return err
				}
				if z.checked[i].Load() {
					continue
				}
				if err := z.decode(i, &b); err != nil {
					return err
				}
			}
		})
	}
	return g.Wait()
}

// seekZstdReader reads a range of a seekZstd's decoded bytes, decoding one
// frame at a time into its own buffers; it seeks within the range (the tar
// reader skips entries so).
type seekZstdReader struct {
	z          *seekZstd
	start, end int64
	pos        int64
	cur        int // the frame in b.out, -1 for none
	b          seekZstdBufs
}

func (r *seekZstdReader) Read(p []byte) (int, error) {
	if r.pos >= r.end {
		return 0, io.EOF
	}
	if r.cur < 0 || !r.holds(r.pos) {
		i := r.z.frameAt(r.pos)
		r.cur = -1
		if err := r.z.decode(i, &r.b); err != nil {
			return 0, err
		}
		r.cur = i
	}
	f := &r.z.frames[r.cur]
	n := copy(p[:min(int64(len(p)), r.end-r.pos)], r.b.out[r.pos-f.at:])
	r.pos += int64(n)
	return n, nil
}

// holds reports whether the frame in the buffer holds decoded offset pos.
func (r *seekZstdReader) holds(pos int64) bool {
	f := &r.z.frames[r.cur]
	return pos >= f.at && pos < f.at+int64(f.n)
}

func (r *seekZstdReader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		offset += r.pos
	case io.SeekEnd:
		offset += r.end
	default:
		offset += r.start
	}
	if offset < r.start {
		return 0, errors.New("seek before the start")
	}
	r.pos = offset
	return offset - r.start, nil
}

// Close lets go of the buffers.
func (r *seekZstdReader) Close() error {
	r.b, r.cur = seekZstdBufs{}, -1
	return nil
}

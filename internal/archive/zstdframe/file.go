package zstdframe

import (
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

// A zstd file that ends with a seek table (what Writer, so
// holdfast export, writes) is seekable in its decoded bytes: the table says
// where each frame starts in the file and in the content. Read from a file,
// such an archive is walked as a plain tar is (by archive's tar walk): the tar
// reader reads headers through a SectionReader, which decodes the frame a
// header is in and seeks past entry data by the table, and each deferred
// blob write decodes the frames of its own blob. The blobs are so decoded
// and hashed side by side, on every core, instead of in order behind one
// stream; what no write read (blobs the store has, padding, what follows the
// archive) is decoded at the end (Verify), so that every frame is checked
// as a stream would check it.
//
// The table is trusted only as far as the file bears it out, before a byte is
// decoded: it must be the file's only seek table, its frames must tile the
// file before it, each frame must start with a frame header whose window is
// within the limit and whose content size, when it has one, is the table's,
// and no frame may be larger than the stream decoder's workers take
// (frameCompCap, frameDecCap). A file that fails any of that is read
// as a stream (Reader), which says what is wrong with it. Each frame
// decoded must then give the content size the table says, and carry the
// checksum it says; errors use the stream's words.
type File struct {
	ra      io.ReaderAt
	size    int64 // of the file, the table included
	table   Table
	offs    []int64 // where each frame starts in the file
	ends    []int64 // where each frame's content ends in the decoded stream
	sums    []bool  // the frame carries its checksum, as the table does
	total   int64   // the decoded size
	dec     *zstd.Decoder
	checked []atomic.Bool // frames decoded and found as the table says
	mu      sync.Mutex
	err     error // the first decoding error
}

// OpenFile reads the seek table at the end of ra (size bytes) and checks
// it against the frames' headers, as File says. It returns nil when ra
// is not read so, for whatever reason: a Reader reads it instead (and
// reports any read error itself).
func OpenFile(ra io.ReaderAt, size int64, limit uint64, workers int) *File {
	t, tableAt := readTable(ra, size)
	if t == nil {
		return nil
	}
	n := t.Len()
	z := &File{ra: ra, size: size, table: *t, offs: make([]int64, n), ends: make([]int64, n), sums: make([]bool, n), checked: make([]atomic.Bool, n)}
	var off, at int64
	hdr := make([]byte, 18) // the largest frame header
	for i := range n {
		e := t.Frame(i)
		if e.Comp == 0 || e.Comp > frameCompCap || e.Size > frameDecCap || off+int64(e.Comp) > tableAt {
			return nil
		}
		h := hdr[:min(len(hdr), int(e.Comp))]
		var fh zstd.Header
		if _, err := ra.ReadAt(h, off); err != nil || fh.Decode(h) != nil || fh.Skippable {
			return nil
		}
		if window(&fh) > limit || fh.HasFCS && fh.FrameContentSize != e.Size {
			return nil
		}
		off += int64(e.Comp)
		at += int64(e.Size)
		z.offs[i], z.ends[i], z.sums[i] = off-int64(e.Comp), at, fh.HasCheckSum
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

// readTable reads the seek table at the end of ra (size bytes), and where
// it starts; nil if there is none holdfast reads by.
func readTable(ra io.ReaderAt, size int64) (*Table, int64) {
	if size < 8+footerSize {
		return nil, 0
	}
	foot := make([]byte, footerSize)
	if _, err := ra.ReadAt(foot, size-footerSize); err != nil {
		return nil, 0
	}
	t, err := parseFooter(foot)
	if err != nil || t.Count == 0 || t.Count > checkedFrames {
		return nil, 0
	}
	payload := t.Count*uint64(t.entrySize()) + footerSize
	tableAt := size - 8 - int64(payload)
	if tableAt < 0 {
		return nil, 0
	}
	b := make([]byte, 8+payload)
	if _, err := ra.ReadAt(b, tableAt); err != nil {
		return nil, 0
	}
	if binary.LittleEndian.Uint32(b) != tableMagic || uint64(binary.LittleEndian.Uint32(b[4:])) != payload {
		return nil, 0
	}
	if t, err = parseTable(b[8:]); err != nil {
		return nil, 0
	}
	return &t, tableAt
}

// Size is the size of the file, its seek table included.
func (z *File) Size() int64 { return z.size }

// ContentSize is the size of the decoded stream.
func (z *File) ContentSize() int64 { return z.total }

// Err is the first decoding error, if any.
func (z *File) Err() error {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.err
}

func (z *File) fail(err error) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.err == nil {
		z.err = err
	}
	return err
}

// Close releases the decoder.
func (z *File) Close() {
	z.dec.Close()
}

// frameAt is the frame whose content holds decoded offset pos < z.total.
func (z *File) frameAt(pos int64) int {
	return sort.Search(len(z.ends), func(i int) bool { return z.ends[i] > pos })
}

// at is where frame i's content starts in the decoded stream.
func (z *File) at(i int) int64 {
	if i == 0 {
		return 0
	}
	return z.ends[i-1]
}

// frame is frame i as the table places it; it has a checksum if both the
// table and the frame carry one.
func (z *File) frame(i int) Frame {
	f := z.table.Frame(i)
	f.Off, f.HasSum = z.offs[i], f.HasSum && z.sums[i]
	return f
}

// bufs are a reader's buffers, reused from frame to frame.
type bufs struct {
	comp, out []byte
}

// decode decodes frame i whole into b.out and checks it against the table.
func (z *File) decode(i int, b *bufs) error {
	f := z.frame(i)
	if cap(b.comp) < int(f.Comp) {
		b.comp = make([]byte, f.Comp)
	}
	b.comp = b.comp[:f.Comp]
	if _, err := z.ra.ReadAt(b.comp, f.Off); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return z.fail(frameErr(f.Off, err))
	}
	if cap(b.out) < int(f.Size) {
		b.out = make([]byte, 0, f.Size)
	}
	// The buffer's capacity is the content the table says: DecodeAll
	// decodes no more (WithDecodeAllCapLimit).
	out, err := z.dec.DecodeAll(b.comp, b.out[:0:f.Size])
	switch {
	case errors.Is(err, zstd.ErrDecoderSizeExceeded):
		err = z.tooLarge(i, b.comp)
	case err != nil:
		err = frameErr(f.Off, err)
	case len(out) != int(f.Size):
		err = tableSizeErr(i, f.Off, f.Size, len(out))
	case f.HasSum && binary.LittleEndian.Uint32(b.comp[len(b.comp)-4:]) != f.Sum:
		err = tableSumErr(i, f.Off, f.Sum, binary.LittleEndian.Uint32(b.comp[len(b.comp)-4:]))
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
func (z *File) tooLarge(i int, comp []byte) error {
	f := z.frame(i)
	out, err := z.dec.DecodeAll(comp, make([]byte, 0, frameDecCap))
	if err != nil {
		return tableSizeErr(i, f.Off, f.Size, "more")
	}
	return tableSizeErr(i, f.Off, f.Size, len(out))
}

// Section reads decoded bytes [start, end).
func (z *File) Section(start, end int64) *SectionReader {
	return &SectionReader{z: z, start: start, end: end, pos: start, cur: -1}
}

// deferFrames is how many frames an entry's data must touch for its
// write to be deferred. A deferred write decodes again the frames it starts
// and ends in (the walk decoded them to read the entry's first bytes and the
// next header): that is cheap beside a blob of many frames, and would decode
// a frame once per blob for blobs smaller than a frame (a layout of many small
// layers), which the walk reads in order instead.
const deferFrames = 4

// Opener reopens size decoded bytes at offset off, for a deferred write:
// each call reads them from skip bytes in. It is nil when they touch fewer
// than deferFrames frames.
func (z *File) Opener(off, size int64) func(skip int64) (io.ReadCloser, error) {
	if size == 0 || off+size > z.total || z.frameAt(off+size-1)-z.frameAt(off)+1 < deferFrames {
		return nil
	}
	return func(skip int64) (io.ReadCloser, error) {
		return z.Section(off+skip, off+size), nil
	}
}

// Verify decodes, workers at a time, every frame nothing decoded yet whose
// content starts before decoded offset below, and returns the first error.
func (z *File) Verify(ctx context.Context, workers int, below int64) error {
	if err := z.Err(); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	var next atomic.Int64
	for range workers {
		g.Go(func() error {
			var b bufs
			for {
				i := int(next.Add(1) - 1)
				if i >= len(z.ends) || z.at(i) >= below {
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

// SectionReader reads a range of a File's decoded bytes, decoding one
// frame at a time into its own buffers; it seeks within the range (the tar
// reader skips entries so).
type SectionReader struct {
	z          *File
	start, end int64
	pos        int64
	cur        int // the frame in b.out, -1 for none
	b          bufs
}

func (r *SectionReader) Read(p []byte) (int, error) {
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
	n := copy(p[:min(int64(len(p)), r.end-r.pos)], r.b.out[r.pos-r.z.at(r.cur):])
	r.pos += int64(n)
	return n, nil
}

// holds reports whether the frame in the buffer holds decoded offset pos.
func (r *SectionReader) holds(pos int64) bool {
	return pos >= r.z.at(r.cur) && pos < r.z.ends[r.cur]
}

func (r *SectionReader) Seek(offset int64, whence int) (int64, error) {
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
func (r *SectionReader) Close() error {
	r.b, r.cur = bufs{}, -1
	return nil
}

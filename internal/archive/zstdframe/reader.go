package zstdframe

import (
	"bytes"
	"errors"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// A zstd stream of many frames (pzstd's, the seekable format's that
// Writer writes, or frames simply concatenated) is decoded frame
// by frame on several cores: a scanner goroutine cuts the compressed stream
// at frame boundaries by walking frame and block headers, without decoding;
// workers decode whole frames into memory (DecodeAll); the reader hands
// their bytes on strictly in order, lending each frame's buffer to the
// walk's read-ahead rather than copying it (Lend). Nothing seeks: the input
// is read once, as it comes.
//
// A stream whose first frame is larger than frameCompCap, or declares
// more content than frameDecCap (every one-frame .tar.zst: K3s airgap
// images, Hauler hauls, Zarf packages), is decoded as it always was, by one
// streaming decoder in the reader's goroutine (streamConcurrency): the scanner
// stops at the cap (or the header), and what it read is given back in front
// of the rest of the stream. Frames after the first
// that are too large to decode whole are decoded in order by a streaming
// decoder: from the scanner's buffer when only their content is too large,
// or as the scanner walks them, through a pipe, when their compressed bytes
// are.
//
// Memory is bounded whatever the stream declares: workers+2 frames are in
// flight (being decoded, decoded and waiting, being read or lent and not given
// back yet), each buffer at most frameCompCap compressed and
// frameDecCap decoded, and reused from frame to frame: with three workers
// (holdfast on two CPUs, GOMAXPROCS being the CPUs + 1), 120 MiB for a stream
// made to cost the most, 40 MiB for frames of 4 MiB. Whether a frame's content
// fits its buffer is known before it is decoded, from its block headers (see
// frameDecCap), so no frame is decoded twice. The streaming decoder holds a
// window, at most the limit, as the one-frame path always did.
//
// The first frame is scanned and decoded in the reader's goroutine, and the
// scanner and workers start on the second read: a caller that reads only
// the start of a stream (Probe) costs one frame, not a pipeline's worth.
//
// The scanner checks every frame's header as the decoder would (the window
// limit of CheckWindow, reserved bits and block types, block sizes), and
// the markers of the stream against what it finds: a pzstd size frame
// against the next frame's compressed size, a seek table against the frames
// since the previous table (their number, compressed and decompressed sizes,
// and checksums where the frames carry theirs). A stream decoded as one (its
// first frame too large) gets only the decoder's own checks, as before.
// Errors name the frame's offset in the compressed stream ("zstd: frame at
// offset 1234567: ..."), except a stream cut off, which is "zstd: unexpected
// EOF" as it always was. A stream of frames cut at a frame boundary is, to
// zstd, a shorter stream: the tar walk that reads it says it is cut off.
const (
	// frameCompCap is the largest compressed frame decoded whole, by a worker:
	// 8 MiB and 64 KiB, what 8 MiB of content takes at most compressed (zstd's
	// bound: 8 MiB and 32 KiB, and the frame's header and checksum). pzstd cuts
	// its input into frames of 8 MiB at its default level, 3, and up to 8 (2 MiB
	// at -1, 4 MiB at -2, 16 MiB from about -12, 32 MiB from -17);
	// Writer's are 4 MiB. A frame of incompressible layer bytes is
	// stored, its compressed size a little more than its content's.
	frameCompCap = 8<<20 + 64<<10
	// frameDecCap is the most content a frame decoded whole may have:
	// 16 MiB. The scanner bounds a frame's content before it is decoded
	// (the declared content size, else its blocks' sizes: raw and RLE blocks
	// say theirs, a compressed block decodes to 128 KiB at most), and the
	// worker decodes into a buffer of that size, no more
	// (WithDecodeAllCapLimit). A frame of more is decoded in order by the
	// streaming decoder, whose memory is its window's.
	frameDecCap = 16 << 20
	// maxBlock is the largest block content zstd allows (RFC 8878,
	// Block_Maximum_Size).
	maxBlock = 128 << 10
	// checkedFrames is how many frames since the last seek table the
	// reader remembers, to check the next seek table entry by entry: 8 MiB
	// of records at most, the frames of a 1 TiB archive cut at 4 MiB.
	// Past it, only the number of frames is checked.
	checkedFrames = 1 << 18
	// tableCap is the largest seek table read whole: as many entries
	// as checkedFrames. Of a larger one only the footer is read.
	tableCap = checkedFrames*entrySizeXXH + footerSize

	pzstdMagic = 0x184D2A50 // pzstd's skippable frame: the next frame's compressed size

	// streamConcurrency is the number of blocks the streaming decoder works
	// on at once: the decoder of a stream whose first frame is large (one
	// frame: what K3s, Hauler and Zarf write), and of a large frame later
	// in a stream of small ones. Small frames are decoded whole, each on one
	// of a few goroutines. One decodes each block in the goroutine that
	// reads the decoder (the walk's read-ahead), with no goroutines of its
	// own: the read-ahead already keeps decoding apart from hashing and
	// writing, and on two CPUs, where those need the other one, splitting a
	// frame's decoding over three goroutines only costs more. The bench's
	// 1 GiB .tar.zst (one frame, 8 MiB window) decodes in 0.62 CPU-s with
	// one, 0.86 with two; its import took 1.57 CPU-s against 1.77.
	streamConcurrency = 1
)

// unit is what the scanner hands on, in stream order: a frame, a seek
// table to check, or the error that ends the stream.
type unit struct {
	kind   unitKind
	off    int64  // where the frame (or table) starts in the compressed stream
	index  int    // the frame's number from the start of the stream
	comp   []byte // the frame, when buffered
	size   int64  // its compressed size, once walked
	sum    uint32 // its checksum field, if hasSum
	hasSum bool
	bound  int  // the most its content can be, if it is buffered
	over   bool // the first frame, larger than frameCompCap: comp is what was read of it

	stream  bool           // decode it in order with the streaming decoder: from comp, or pipe
	pipe    *io.PipeReader // the frame as the scanner walks it, when too large to buffer
	mu      sync.Mutex
	scanErr error // why the scanner stopped feeding pipe, under mu

	out   []byte // the decoded frame, from a worker
	err   error  // kind errorUnit; or the frame's decoding error
	table Table
	done  chan struct{} // closed once out, err or stream is final
}

// fedErr is why the scanner stopped feeding u's pipe, if it did.
func (u *unit) fedErr() error {
	if u.pipe == nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.scanErr
}

type unitKind uint8

const (
	frameUnit unitKind = iota
	tableUnit
	errorUnit
)

// Reader is the reader of a zstd stream decoded frame by frame. Read and
// Close are not safe for concurrent use.
type Reader struct {
	r       io.Reader // the compressed stream
	limit   uint64    // the largest window accepted
	workers int

	dec  *zstd.Decoder // DecodeAll, shared by the workers
	sdec *zstd.Decoder // streaming, in the reader's goroutine: made when needed

	// The scanner's state: the reader's until the pipeline starts, then the
	// scanner goroutine's.
	off     int64 // the compressed offset of the next byte of r
	frames  int   // data frames seen
	marker  sizeMark
	pending error // an error to hand on after the unit just scanned
	copyBuf []byte

	// The pipeline, once started.
	started bool
	order   chan *unit // every unit, in stream order; closed when the scanner stops
	work    chan *unit // frames for the workers
	stop    chan struct{}
	wg      sync.WaitGroup

	// free holds the units to reuse, made with the reader: a lent frame's
	// release, from any goroutine, puts its unit back here. Its capacity,
	// workers+2, bounds the units there are (units counts them), so the
	// frames in flight, lent ones included.
	free  chan *unit
	units int

	// The reader's state.
	reads   int
	single  *zstd.Decoder // the whole stream, when its first frame is too large
	ended   bool          // the stream has no more units (the scanner's end, before the pipeline)
	cur     *unit
	rest    []byte    // the unread part of cur.out
	srd     io.Reader // the streaming decoder reading cur
	curDec  uint64    // bytes decoded of cur
	records []Frame
	counted uint64 // frames since the last seek table
	err     error  // sticky
	closed  bool
}

// sizeMark is a pending pzstd size frame.
type sizeMark struct {
	ok   bool
	off  int64
	size uint32
}

// errClosed stops a scanner writing into a pipe the reader gave up.
var errClosed = errors.New("zstd: reader closed")

// NewReader decodes r, a zstd stream, frame by frame on workers
// goroutines (0: DefaultWorkers), accepting windows up to limit.
func NewReader(r io.Reader, limit uint64, workers int) *Reader {
	if workers <= 0 {
		workers = DefaultWorkers()
	}
	return &Reader{r: r, limit: limit, workers: workers, free: make(chan *unit, workers+2)}
}

// Read reads the decoded stream. Its errors name zstd and, when they are
// about one frame or seek table, where it is (Error); a stream cut off is
// "zstd: unexpected EOF".
func (z *Reader) Read(p []byte) (int, error) {
	n, err := z.read(p)
	if err != nil && err != io.EOF {
		err = say(err, z.limit)
	}
	return n, err
}

func (z *Reader) read(p []byte) (int, error) {
	if z.err != nil {
		return 0, z.err
	}
	z.tick()
	for len(p) > 0 {
		if err := z.ready(); err != nil {
			return 0, err
		}
		if z.single != nil {
			// As it always was; Read still says a window too large as
			// holdfast does.
			n, err := z.single.Read(p)
			if err != nil && err != io.EOF {
				err = prefixed(err)
			}
			if err != nil {
				z.err = err
			}
			return n, err
		}
		if len(z.rest) > 0 {
			n := copy(p, z.rest)
			z.rest = z.rest[n:]
			z.curDec += uint64(n)
			return n, nil
		}
		n, err := z.srd.Read(p)
		z.curDec += uint64(n)
		if err == io.EOF {
			err = z.cur.fedErr()
			if err == nil {
				z.srd = nil
			}
		} else if err != nil {
			if e := z.cur.fedErr(); e != nil {
				err = e
			} else {
				err = frameErr(z.cur.off, err)
			}
		}
		if err != nil {
			return n, z.fail(err)
		}
		if n > 0 {
			return n, nil
		}
	}
	return 0, nil
}

// Lend hands the rest of the frame being read, decoded whole, to the caller
// without copying it: the read-ahead passes such a frame on as it is. The
// caller reads b and then calls release, once, from any goroutine, which
// gives the frame's buffers back to the scanner. ok is false when the next
// bytes are not in such a buffer (a stream decoded as one, a frame decoded
// in order by the streaming decoder, the end of the stream or an error):
// Read them.
func (z *Reader) Lend() (b []byte, release func(), ok bool) {
	if z.err != nil || z.single != nil {
		return nil, nil, false
	}
	z.tick()
	if z.ready() != nil || len(z.rest) == 0 {
		return nil, nil, false
	}
	b = z.rest
	z.curDec += uint64(len(b))
	// Done with here: the unit is the releaser's from now on.
	u := z.endUnit()
	return b, func() { z.recycle(u) }, true
}

// tick counts a read. The pipeline starts on the second: a caller that reads
// only the start of the stream (Probe) costs one frame, not a pipeline's
// worth.
func (z *Reader) tick() {
	if z.single != nil {
		return
	}
	z.reads++
	if z.reads == 2 && !z.ended {
		z.start()
	}
}

// ready moves on to the next unit until there are bytes to read (in z.rest,
// from z.srd, or from z.single): io.EOF at the end of the stream.
func (z *Reader) ready() error {
	for z.single == nil && len(z.rest) == 0 && z.srd == nil {
		if z.cur != nil {
			z.finishUnit()
		}
		u, err := z.next()
		if err != nil {
			return z.fail(err)
		}
		if z.single != nil {
			return nil
		}
		if u == nil {
			return io.EOF
		}
		if err := z.begin(u); err != nil {
			return z.fail(err)
		}
	}
	return nil
}

func (z *Reader) fail(err error) error {
	z.err = err
	return err
}

// next is the next unit in stream order, decoded if it is a frame for the
// workers; nil at the end of the stream. Before the pipeline starts, it
// scans and decodes here.
func (z *Reader) next() (*unit, error) {
	if z.started {
		u, ok := <-z.order
		if !ok {
			return nil, nil
		}
		<-u.done
		return u, nil
	}
	if z.ended {
		return nil, nil
	}
	u := z.unit()
	more, err := z.scan(u)
	if err != nil {
		z.ended = true
		return nil, err
	}
	if !more {
		z.ended = true
		return nil, nil
	}
	if u.over {
		// The first frame is larger than frameCompCap: decode the
		// whole stream as one, with what was scanned in front.
		return nil, z.startSingle(u.comp)
	}
	if u.kind == frameUnit && !u.stream {
		z.newDecoder()
		z.decode(u)
	}
	return u, nil
}

// unit is a unit to scan into before the pipeline starts: one given back,
// else a new one.
func (z *Reader) unit() *unit {
	select {
	case u := <-z.free:
		return u
	default:
		z.units++
		return &unit{}
	}
}

// startSingle switches to one streaming decoder for the whole stream, head
// being what the scanner read of it.
func (z *Reader) startSingle(head []byte) error {
	zr, err := zstd.NewReader(io.MultiReader(bytes.NewReader(head), z.r),
		zstd.WithDecoderMaxWindow(z.limit),
		zstd.WithDecoderConcurrency(streamConcurrency),
		zstd.WithDecoderLowmem(true),
	)
	if err != nil {
		return err
	}
	z.single = zr
	return nil
}

// begin makes u the unit being read.
func (z *Reader) begin(u *unit) error {
	switch u.kind {
	case errorUnit:
		return u.err
	case tableUnit:
		err := z.checkTable(u)
		z.recycle(u)
		return err
	}
	if u.err != nil {
		return u.err
	}
	z.cur, z.curDec = u, 0
	if !u.stream {
		z.rest = u.out
		return nil
	}
	if z.sdec == nil {
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderMaxWindow(z.limit),
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderLowmem(true),
		)
		if err != nil {
			return err
		}
		z.sdec = d
	}
	// Not a *bytes.Reader: the decoder would decode a small one whole into
	// memory, as large as its blocks make it.
	var src io.Reader = struct{ io.Reader }{bytes.NewReader(u.comp)}
	if u.pipe != nil {
		src = u.pipe
	}
	if err := z.sdec.Reset(src); err != nil {
		return frameErr(u.off, err)
	}
	z.srd = z.sdec
	return nil
}

// finishUnit records the frame just read for the next seek table and gives
// its buffers back.
func (z *Reader) finishUnit() {
	z.recycle(z.endUnit())
}

// endUnit records the frame just read for the next seek table and leaves
// it: the caller recycles it.
func (z *Reader) endUnit() *unit {
	u := z.cur
	z.cur, z.rest, z.srd = nil, nil, nil
	if len(z.records) < checkedFrames {
		z.records = append(z.records, Frame{Off: u.off, Comp: uint64(u.size), Size: z.curDec, Sum: u.sum, HasSum: u.hasSum})
	}
	z.counted++
	return u
}

// recycle gives u's buffers back to be scanned into again. It is safe from
// any goroutine: a lent frame is released by whoever read it.
func (z *Reader) recycle(u *unit) {
	select {
	case z.free <- u:
	default:
	}
}

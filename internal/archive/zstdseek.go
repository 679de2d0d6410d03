package archive

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"

	"github.com/klauspost/compress/zstd"
)

// The seekable zstd format (zstd's contrib/seekable_format): independent
// frames, then a seek table in a skippable frame that ends with a footer.
const (
	seekTableMagic   = 0x184D2A5E // the skippable frame that holds the table
	seekableMagic    = 0x8F92EAB1 // the footer's last four bytes
	seekFooterSize   = 9          // frame count, descriptor, magic
	seekChecksumFlag = 0x80       // descriptor: entries carry a checksum
	seekReservedBits = 0x7c       // descriptor: must be zero
	seekEntrySize    = 8          // compressed size, decompressed size
	seekEntrySizeXXH = 12         // the same and a checksum
	seekMaxFrameSize = 64 << 20   // the largest FrameSize: each frame in flight is held whole
)

const (
	// DefaultSeekableFrameSize is the content of each frame SeekableZstdWriter
	// writes unless told otherwise: 4 MiB. A frame is the unit holdfast
	// decodes on one core (see zstdframes.go), so frames must be many for an
	// archive to decode on several; each costs a frame header, a checksum, a
	// seek table entry and the matches it cannot make into the frame before.
	// BenchmarkSeekableFrameSize (256 MiB, alternately 256 KiB of text and
	// of random bytes, default level, on two CPUs shared with other work):
	// the ratio is 0.598 for frames of 1 to 16 MiB alike; compressing takes
	// 1.0-1.1 CPU-s from 2 MiB up (1.2 at 1 MiB); decoding on one worker
	// 0.18-0.19 CPU-s at 1 and 2 MiB, 0.19-0.22 at 4, 0.23 at 8, 0.25 at 16
	// (the smaller the frame, the more of it stays in cache). Real archives
	// repeat over longer distances than this input (files alike in several
	// layers), where larger frames keep more matches. 4 MiB: 64 frames per
	// 256 MiB for the workers to share, each far under zstdFrameCompCap and
	// zstdFrameDecCap, and a 12-byte table entry each.
	DefaultSeekableFrameSize = 4 << 20

	seekMinFrameSize = 64 << 10
)

// SeekableOptions are the choices of a SeekableZstdWriter. The zero value is
// the default of each.
type SeekableOptions struct {
	// FrameSize is how many bytes of content each frame holds (the last one
	// less): 0 is DefaultSeekableFrameSize; it is held between 64 KiB and
	// 64 MiB. holdfast decodes frames of up to 16 MiB (and 8 MiB
	// compressed) on several cores, larger ones one after the other.
	FrameSize int
	// Level is the zstd level, 1 to 22 as the zstd CLI takes it (mapped to
	// the klauspost/compress encoder's four levels); 0 is zstd's default, 3.
	Level int
	// Workers is how many frames are compressed at once: 0 is one per CPU,
	// at most 4 (defaultSeekableWorkers). It changes the speed and the
	// memory, never the bytes written.
	Workers int
}

// SeekableZstdWriter compresses what is written to it as a seekable zstd
// stream: frames of FrameSize bytes of content, each compressed on its own
// (with its checksum, and its content size unless it is the last one and
// under 256 bytes), then, on Close, a seek table with
// each frame's sizes and checksum. Every zstd decoder reads the result as
// a plain zstd stream; holdfast decodes its frames in parallel. The output
// depends only on the bytes written and on FrameSize and Level: the same
// input gives the same bytes.
//
// Write and Close are not safe for concurrent use. Close must be called;
// it does not close the underlying writer.
type SeekableZstdWriter struct {
	w         io.Writer
	frameSize int
	inFlight  int // frames being compressed at most, beyond the one being filled
	encs      chan *zstd.Encoder
	cur       *seekFrame   // the frame being filled, if any
	pending   []*seekFrame // being compressed, in order
	spare     []*seekFrame // written out, their buffers to reuse
	entries   []seekEntry  // the frames written, for the seek table
	err       error        // sticky: a write to w failed, or Close was called
	closed    bool
}

// seekFrame is one frame's content and, once done is closed, its compressed
// bytes.
type seekFrame struct {
	in, out []byte
	done    chan struct{}
}

// seekEntry is a frame as the seek table says it.
type seekEntry struct {
	comp, dec uint32
	sum       uint32 // the low 32 bits of the content's XXH64
}

// errWriterClosed is what a SeekableZstdWriter says to a write after Close.
var errWriterClosed = errors.New("zstd: write after close")

// NewSeekableZstdWriter returns a writer that compresses into w, as
// SeekableZstdWriter says. Nothing is written to w before the first frame
// is full, or Close.
func NewSeekableZstdWriter(w io.Writer, opts SeekableOptions) *SeekableZstdWriter {
	size, workers := opts.sizes()
	level := zstd.SpeedDefault
	if opts.Level != 0 {
		level = zstd.EncoderLevelFromZstd(opts.Level)
	}
	encOpts := []zstd.EOption{
		zstd.WithEncoderLevel(level),
		zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(true),
		// Buffers as large as what is encoded, not twice that.
		zstd.WithLowerEncoderMem(true),
	}
	if w := seekableWindow(size); w > 0 {
		encOpts = append(encOpts, zstd.WithWindowSize(w))
	}
	z := &SeekableZstdWriter{
		w:         w,
		frameSize: size,
		inFlight:  workers + 1,
		encs:      make(chan *zstd.Encoder, workers),
	}
	for range workers {
		// EncodeAll only: an encoder used so starts no goroutine of its own.
		enc, err := zstd.NewWriter(nil, encOpts...)
		if err != nil {
			// The options are constants that the encoder accepts.
			panic(fmt.Sprintf("zstd encoder: %v", err))
		}
		z.encs <- enc
	}
	return z
}

// Write buffers p and compresses each frame it fills. An error from the
// underlying writer is returned by this Write or a later one, and by Close.
func (z *SeekableZstdWriter) Write(p []byte) (int, error) {
	if z.err != nil {
		return 0, z.err
	}
	n := 0
	for len(p) > 0 {
		if z.cur == nil {
			z.cur = z.takeFrame()
		}
		k := min(len(p), z.frameSize-len(z.cur.in))
		z.cur.in = append(z.cur.in, p[:k]...)
		p = p[k:]
		n += k
		if len(z.cur.in) == z.frameSize {
			if err := z.submit(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// Close compresses the last frame, writes every frame still pending and the
// seek table. A stream to which nothing was written is one empty frame and
// its table. Close does not close the underlying writer; calling it again
// returns what the first call did.
func (z *SeekableZstdWriter) Close() error {
	if z.closed {
		if z.err == errWriterClosed {
			return nil
		}
		return z.err
	}
	z.closed = true
	if z.err == nil && (z.cur != nil || len(z.entries)+len(z.pending) == 0) {
		if z.cur == nil {
			z.cur = z.takeFrame()
		}
		z.err = z.submit()
	}
	for z.err == nil && len(z.pending) > 0 {
		z.err = z.flushOne()
	}
	// Whatever happened, wait for the frames still being compressed: no
	// goroutine outlives Close.
	for _, f := range z.pending {
		<-f.done
	}
	z.pending = nil
	if z.err == nil {
		z.err = z.writeSeekTable()
	}
	err := z.err
	if err == nil {
		z.err = errWriterClosed
	}
	return err
}

// sizes are the frame size and the workers of o, defaults applied.
func (o SeekableOptions) sizes() (frameSize, workers int) {
	frameSize = o.FrameSize
	if frameSize == 0 {
		frameSize = DefaultSeekableFrameSize
	}
	frameSize = min(max(frameSize, seekMinFrameSize), seekMaxFrameSize)
	workers = o.Workers
	if workers <= 0 {
		workers = defaultSeekableWorkers()
	}
	return frameSize, workers
}

// Memory is about the most a SeekableZstdWriter with options o holds,
// however much is written through it: its frames in flight (workers + 2:
// those being compressed, one written out, one being filled), each its
// content and room for it compressed, and an encoder per worker, its window
// and its tables (measured: 6 MiB for frames of 4 MiB at the default level).
func (o SeekableOptions) Memory() int64 {
	size, workers := o.sizes()
	window := seekableWindow(size)
	if window == 0 {
		window = 8 << 20
	}
	frame := int64(2*size + size>>8 + 1<<10)
	return int64(workers+2)*frame + int64(workers)*int64(window+4<<20)
}

// defaultSeekableWorkers is how many frames a SeekableZstdWriter compresses
// at once unless told: one per CPU holdfast may use, at most 4. Not
// GOMAXPROCS, which holdfast sets one above the CPUs: an encoder more than
// the cores costs its memory (each holds its frame, compressed and not, and
// its tables) and gains nothing.
func defaultSeekableWorkers() int {
	return max(1, min(runtime.GOMAXPROCS(0), runtime.NumCPU(), 4))
}

// seekableWindow is the window each frame's encoder keeps: the least power
// of two that holds a whole frame, so that its history buffer is a frame's
// size and not the encoder's default of 8 MiB; 0 (that default) for frames
// larger than 8 MiB. A frame is compressed on its own, so no match reaches
// further back than its start: the bytes written are the same either way
// (TestSeekableZstdWriterBytes), and a frame header written whole (single
// segment) names no window.
func seekableWindow(frameSize int) int {
	const encoderDefault = 8 << 20
	if frameSize > encoderDefault {
		return 0
	}
	w := zstd.MinWindowSize
	for w < frameSize {
		w <<= 1
	}
	return w
}

// takeFrame is an empty frame to fill, a spare one if any.
func (z *SeekableZstdWriter) takeFrame() *seekFrame {
	if n := len(z.spare); n > 0 {
		f := z.spare[n-1]
		z.spare = z.spare[:n-1]
		f.in = f.in[:0]
		return f
	}
	// out holds the frame compressed: no larger than its content and the
	// headers of its blocks (the encoder stores a block it cannot shrink),
	// so it is made once, not grown by doubling as the encoder appends.
	return &seekFrame{in: make([]byte, 0, z.frameSize), out: make([]byte, 0, z.frameSize+z.frameSize>>8+1<<10)}
}

// submit hands the frame being filled to an encoder, then writes out the
// oldest pending frames while more than inFlight are pending.
func (z *SeekableZstdWriter) submit() error {
	f := z.cur
	z.cur = nil
	f.done = make(chan struct{})
	z.pending = append(z.pending, f)
	go func() {
		enc := <-z.encs
		if len(f.in) == 0 {
			f.out = append(f.out[:0], emptyZstdFrame...)
		} else {
			f.out = enc.EncodeAll(f.in, f.out[:0])
		}
		z.encs <- enc
		close(f.done)
	}()
	for len(z.pending) > z.inFlight {
		if err := z.flushOne(); err != nil {
			return err
		}
	}
	return nil
}

// flushOne waits for the oldest pending frame, writes it and keeps its entry.
func (z *SeekableZstdWriter) flushOne() error {
	f := z.pending[0]
	<-f.done
	z.pending = z.pending[1:]
	out := f.out
	// Every frame ends with its checksum (WithEncoderCRC, and the empty
	// frame's by hand): the seek table's is the same value.
	e := seekEntry{comp: uint32(len(out)), dec: uint32(len(f.in)), sum: binary.LittleEndian.Uint32(out[len(out)-4:])}
	_, err := z.w.Write(out)
	z.spare = append(z.spare, f)
	if err != nil {
		z.err = err
		return err
	}
	z.entries = append(z.entries, e)
	return nil
}

// writeSeekTable writes the seek table of the frames written: a skippable
// frame of entries (compressed size, content size, checksum) and a footer.
func (z *SeekableZstdWriter) writeSeekTable() error {
	payload := len(z.entries)*seekEntrySizeXXH + seekFooterSize
	b := make([]byte, 0, 8+payload)
	b = binary.LittleEndian.AppendUint32(b, seekTableMagic)
	b = binary.LittleEndian.AppendUint32(b, uint32(payload))
	for _, e := range z.entries {
		b = binary.LittleEndian.AppendUint32(b, e.comp)
		b = binary.LittleEndian.AppendUint32(b, e.dec)
		b = binary.LittleEndian.AppendUint32(b, e.sum)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(z.entries)))
	b = append(b, seekChecksumFlag)
	b = binary.LittleEndian.AppendUint32(b, seekableMagic)
	_, err := z.w.Write(b)
	return err
}

// emptyZstdFrame is a frame of no content with its checksum, the one frame
// of an empty seekable stream (the encoder writes none for empty input):
// single segment, a one-byte content size of 0, an empty last raw block and
// the low 32 bits of XXH64 of nothing, 0x51D8E999.
var emptyZstdFrame = []byte{0x28, 0xb5, 0x2f, 0xfd, 0x24, 0x00, 0x01, 0x00, 0x00, 0x99, 0xe9, 0xd8, 0x51}

// seekTable is a parsed seek table.
type seekTable struct {
	count   uint64      // the frames it says
	entries []seekEntry // each one's sizes, unless only the footer was read
	sums    bool        // the entries carry checksums
}

// errNotSeekTable says a skippable frame with the seek table's magic does
// not end as a seek table does (another use of the magic), or declares
// reserved bits: it is not read as one.
var errNotSeekTable = errors.New("not a seek table")

// parseSeekTable reads the payload of a seek table's skippable frame (after
// its magic and size). The footer must be whole and say as many entries as
// the payload holds.
func parseSeekTable(p []byte) (seekTable, error) {
	if len(p) < seekFooterSize {
		return seekTable{}, errNotSeekTable
	}
	t, err := parseSeekFooter(p[len(p)-seekFooterSize:])
	if err != nil {
		return t, err
	}
	size := seekEntrySize
	if t.sums {
		size = seekEntrySizeXXH
	}
	body := p[:len(p)-seekFooterSize]
	if uint64(len(body)) != t.count*uint64(size) {
		return seekTable{}, fmt.Errorf("its footer says %d frames (%d bytes of entries), it holds %d bytes of entries", t.count, t.count*uint64(size), len(body))
	}
	t.entries = make([]seekEntry, t.count)
	for i := range t.entries {
		e := body[i*size:]
		t.entries[i] = seekEntry{comp: binary.LittleEndian.Uint32(e[0:4]), dec: binary.LittleEndian.Uint32(e[4:8])}
		if t.sums {
			t.entries[i].sum = binary.LittleEndian.Uint32(e[8:12])
		}
	}
	return t, nil
}

// parseSeekFooter reads a seek table's footer: the number of frames and
// whether entries carry checksums.
func parseSeekFooter(foot []byte) (seekTable, error) {
	desc := foot[4]
	if len(foot) != seekFooterSize || binary.LittleEndian.Uint32(foot[5:9]) != seekableMagic || desc&seekReservedBits != 0 {
		return seekTable{}, errNotSeekTable
	}
	return seekTable{count: uint64(binary.LittleEndian.Uint32(foot[0:4])), sums: desc&seekChecksumFlag != 0}, nil
}

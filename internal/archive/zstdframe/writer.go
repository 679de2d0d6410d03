package zstdframe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"

	"github.com/klauspost/compress/zstd"
)

const (
	// DefaultFrameSize is the content of each frame Writer
	// writes unless told otherwise: 4 MiB. A frame is the unit holdfast
	// decodes on one core (see Reader), so frames must be many for an
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
	// 256 MiB for the workers to share, each far under frameCompCap and
	// frameDecCap, and a 12-byte table entry each.
	DefaultFrameSize = 4 << 20

	minFrameSize = 64 << 10
	maxFrameSize = 64 << 20 // each frame in flight is held whole
)

// Options are the choices of a Writer. The zero value is
// the default of each.
type Options struct {
	// FrameSize is how many bytes of content each frame holds (the last one
	// less): 0 is DefaultFrameSize; it is held between 64 KiB and
	// 64 MiB. holdfast decodes frames of up to 16 MiB (and 8 MiB
	// compressed) on several cores, larger ones one after the other.
	FrameSize int
	// Level is the zstd level, 1 to 22 as the zstd CLI takes it (mapped to
	// the klauspost/compress encoder's four levels); 0 is zstd's default, 3.
	Level int
	// Workers is how many frames are compressed at once: 0 is one per CPU,
	// at most 4 (defaultEncoders). It changes the speed and the
	// memory, never the bytes written.
	Workers int
}

// Writer compresses what is written to it as a seekable zstd
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
type Writer struct {
	w         io.Writer
	frameSize int
	inFlight  int // frames being compressed at most, beyond the one being filled
	encs      chan *zstd.Encoder
	cur       *frameBuf   // the frame being filled, if any
	pending   []*frameBuf // being compressed, in order
	spare     []*frameBuf // written out, their buffers to reuse
	table     []byte      // the seek table's entries of the frames written
	err       error       // sticky: a write to w failed, or Close was called
	closed    bool
}

// frameBuf is one frame's content and, once done is closed, its compressed
// bytes.
type frameBuf struct {
	in, out []byte
	done    chan struct{}
}

// errWriterClosed is what a Writer says to a write after Close.
var errWriterClosed = errors.New("zstd: write after close")

// NewWriter returns a writer that compresses into w, as
// Writer says. Nothing is written to w before the first frame
// is full, or Close.
func NewWriter(w io.Writer, opts Options) *Writer {
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
	if w := encoderWindow(size); w > 0 {
		encOpts = append(encOpts, zstd.WithWindowSize(w))
	}
	z := &Writer{
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
func (z *Writer) Write(p []byte) (int, error) {
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
func (z *Writer) Close() error {
	if z.closed {
		if z.err == errWriterClosed {
			return nil
		}
		return z.err
	}
	z.closed = true
	if z.err == nil && (z.cur != nil || len(z.table)+len(z.pending) == 0) {
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
func (o Options) sizes() (frameSize, workers int) {
	frameSize = o.FrameSize
	if frameSize == 0 {
		frameSize = DefaultFrameSize
	}
	frameSize = min(max(frameSize, minFrameSize), maxFrameSize)
	workers = o.Workers
	if workers <= 0 {
		workers = defaultEncoders()
	}
	return frameSize, workers
}

// Memory is about the most a Writer with options o holds,
// however much is written through it: its frames in flight (workers + 2:
// those being compressed, one written out, one being filled), each its
// content and room for it compressed, and an encoder per worker, its window
// and its tables (measured: 6 MiB for frames of 4 MiB at the default level).
func (o Options) Memory() int64 {
	size, workers := o.sizes()
	window := encoderWindow(size)
	if window == 0 {
		window = 8 << 20
	}
	frame := int64(2*size + size>>8 + 1<<10)
	return int64(workers+2)*frame + int64(workers)*int64(window+4<<20)
}

// defaultEncoders is how many frames a Writer compresses
// at once unless told: one per CPU holdfast may use, at most 4. Not
// GOMAXPROCS, which holdfast sets one above the CPUs: an encoder more than
// the cores costs its memory (each holds its frame, compressed and not, and
// its tables) and gains nothing.
func defaultEncoders() int {
	return max(1, min(runtime.GOMAXPROCS(0), runtime.NumCPU(), 4))
}

// encoderWindow is the window each frame's encoder keeps: the least power
// of two that holds a whole frame, so that its history buffer is a frame's
// size and not the encoder's default of 8 MiB; 0 (that default) for frames
// larger than 8 MiB. A frame is compressed on its own, so no match reaches
// further back than its start: the bytes written are the same either way
// (TestSeekableZstdWriterBytes), and a frame header written whole (single
// segment) names no window.
func encoderWindow(frameSize int) int {
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
func (z *Writer) takeFrame() *frameBuf {
	if n := len(z.spare); n > 0 {
		f := z.spare[n-1]
		z.spare = z.spare[:n-1]
		f.in = f.in[:0]
		return f
	}
	// out holds the frame compressed: no larger than its content and the
	// headers of its blocks (the encoder stores a block it cannot shrink),
	// so it is made once, not grown by doubling as the encoder appends.
	return &frameBuf{in: make([]byte, 0, z.frameSize), out: make([]byte, 0, z.frameSize+z.frameSize>>8+1<<10)}
}

// submit hands the frame being filled to an encoder, then writes out the
// oldest pending frames while more than inFlight are pending.
func (z *Writer) submit() error {
	f := z.cur
	z.cur = nil
	f.done = make(chan struct{})
	z.pending = append(z.pending, f)
	go func() {
		enc := <-z.encs
		if len(f.in) == 0 {
			f.out = append(f.out[:0], emptyFrame...)
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
func (z *Writer) flushOne() error {
	f := z.pending[0]
	<-f.done
	z.pending = z.pending[1:]
	out := f.out
	// Every frame ends with its checksum (WithEncoderCRC, and the empty
	// frame's by hand): the seek table's is the same value.
	_, err := z.w.Write(out)
	z.spare = append(z.spare, f)
	if err != nil {
		z.err = err
		return err
	}
	z.table = binary.LittleEndian.AppendUint32(z.table, uint32(len(out)))
	z.table = binary.LittleEndian.AppendUint32(z.table, uint32(len(f.in)))
	z.table = append(z.table, out[len(out)-4:]...)
	return nil
}

// writeSeekTable writes the seek table of the frames written: a skippable
// frame of entries (compressed size, content size, checksum) and a footer.
func (z *Writer) writeSeekTable() error {
	payload := len(z.table) + footerSize
	b := make([]byte, 0, 8+payload)
	b = binary.LittleEndian.AppendUint32(b, tableMagic)
	b = binary.LittleEndian.AppendUint32(b, uint32(payload))
	b = append(b, z.table...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(z.table)/entrySizeXXH))
	b = append(b, checksumFlag)
	b = binary.LittleEndian.AppendUint32(b, seekableMagic)
	_, err := z.w.Write(b)
	return err
}

// emptyFrame is a frame of no content with its checksum, the one frame
// of an empty seekable stream (the encoder writes none for empty input):
// single segment, a one-byte content size of 0, an empty last raw block and
// the low 32 bits of XXH64 of nothing, 0x51D8E999.
var emptyFrame = []byte{0x28, 0xb5, 0x2f, 0xfd, 0x24, 0x00, 0x01, 0x00, 0x00, 0x99, 0xe9, 0xd8, 0x51}

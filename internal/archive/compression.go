package archive

import (
	"bufio"
	"bytes"
	"compress/bzip2"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/pierrec/lz4/v4"
	xzdec "github.com/therootcompany/xz"

	"github.com/holdfast-project/holdfast/internal/archive/zstdframe"
	"github.com/holdfast-project/holdfast/internal/units"
)

const (
	// peekSize is how much of a stream Decompress looks at before choosing a
	// decoder. It is large enough to look past a few zstd/lz4 skippable frames.
	peekSize = 64 << 10

	// zstdMaxWindow is the largest zstd window accepted: 128 MiB, what the
	// zstd CLI itself decodes unless told otherwise (`--long=27`; level 19
	// and above use up to 8 MiB). The decoder allocates as much history as a
	// frame header declares, before it decodes the first block, and fills it
	// as the data asks: a larger window is refused, so that a tiny hostile
	// file cannot cost gigabytes.
	zstdMaxWindow = 128 << 20

	// xzMaxDict is the largest xz (LZMA2) dictionary accepted: 128 MiB;
	// `xz -9` uses 64 MiB. The decoder takes the declared size as its
	// dictionary's and fills it as it decodes.
	xzMaxDict = 128 << 20
)

var (
	magicGzip      = []byte{0x1f, 0x8b}
	magicZstd      = []byte{0x28, 0xb5, 0x2f, 0xfd}
	magicBzip2     = []byte("BZh")
	magicXz        = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	magicLz4       = []byte{0x04, 0x22, 0x4d, 0x18}
	magicLz4Legacy = []byte{0x02, 0x21, 0x4c, 0x18}
)

// isSkippableFrame reports whether b starts with the magic number of a zstd
// (or lz4) skippable frame: 0x184D2A50 to 0x184D2A5F, little-endian.
func isSkippableFrame(b []byte) bool {
	return len(b) >= 4 && b[0]&0xf0 == 0x50 && b[1] == 0x2a && b[2] == 0x4d && b[3] == 0x18
}

// Sniff tells the compression of a stream from its first bytes. It looks past
// leading skippable frames (shared by zstd and lz4); a stream that starts with
// a skippable frame that runs past b is taken to be zstd. Anything it does not
// recognise is None.
func Sniff(b []byte) Compression {
	for skipped := false; ; skipped = true {
		switch {
		case isSkippableFrame(b):
			if len(b) < 8 {
				return Zstd
			}
			n := uint64(binary.LittleEndian.Uint32(b[4:8]))
			if 8+n >= uint64(len(b)) {
				// The frame runs to (or past) the end of what we can see.
				return Zstd
			}
			b = b[8+n:]
			continue
		case bytes.HasPrefix(b, magicZstd):
			return Zstd
		case bytes.HasPrefix(b, magicLz4), bytes.HasPrefix(b, magicLz4Legacy):
			return Lz4
		}
		if skipped {
			// Skippable frames followed by something that is neither zstd nor lz4.
			return None
		}
		break
	}
	switch {
	case bytes.HasPrefix(b, magicGzip):
		return Gzip
	case bytes.HasPrefix(b, magicXz):
		return Xz
	case len(b) >= 4 && bytes.HasPrefix(b, magicBzip2) && b[3] >= '1' && b[3] <= '9':
		// "BZh" and a block size digit. A tar whose first member is named
		// "BZh1..." would match too, so also check the first block's magic
		// (or the end-of-stream magic of an empty stream) when we have it.
		if len(b) >= 10 {
			m := b[4:10]
			if !bytes.Equal(m, []byte{0x31, 0x41, 0x59, 0x26, 0x53, 0x59}) &&
				!bytes.Equal(m, []byte{0x17, 0x72, 0x45, 0x38, 0x50, 0x90}) {
				return None
			}
		}
		return Bzip2
	}
	return None
}

// Decompress peeks at r, chooses a decoder by the stream's magic bytes and
// returns a reader of the decompressed bytes (r itself, buffered, for None).
// Closing the result releases the decoder; it does not close r. Decoding errors
// keep the decoder's cause and name the compression ("zstd: unexpected EOF").
// A truncated stream is an error, never a short read that ends in io.EOF.
func Decompress(r io.Reader) (io.ReadCloser, Compression, error) {
	return decompress(r, zstdMaxWindow)
}

// Drain decompresses r as a walk's read-ahead reads it (Decompress, read a
// read-ahead block at a time, a zstd frame decoded whole taken as it is) and
// discards the bytes, returning how many it decoded: the decoding a walk of
// r does and nothing else. The bench harness times it as the floor of a
// compressed archive's import.
func Drain(r io.Reader) (int64, Compression, error) {
	return DrainWorkers(r, 0)
}

// DrainWorkers is Drain decoding the frames of a multi-frame zstd stream on
// the given number of goroutines (0: as Decompress does, min(GOMAXPROCS, 4)).
// The bench times the decoding with one and with two.
func DrainWorkers(r io.Reader, zstdWorkers int) (int64, Compression, error) {
	rc, c, err := decompressWith(r, zstdMaxWindow, zstdWorkers)
	if err != nil {
		return 0, c, err
	}
	defer rc.Close()
	lender, _ := rc.(blockLender)
	buf := make([]byte, aheadBlockSize)
	var n int64
	for {
		if lender != nil {
			// A frame decoded whole is passed on by the read-ahead as it is.
			if b, release, ok := lender.Lend(); ok {
				n += int64(len(b))
				release()
				continue
			}
		}
		k, err := io.ReadFull(rc, buf)
		n += int64(k)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return n, c, nil
		}
		if err != nil {
			return n, c, err
		}
	}
}

// decompress is Decompress with a chosen zstd window limit (tests and fuzzing
// use a small one: a frame header alone makes the decoder allocate its window).
func decompress(r io.Reader, zstdWindow uint64) (io.ReadCloser, Compression, error) {
	return decompressWith(r, zstdWindow, 0)
}

// decompressWith is decompress decoding the frames of a multi-frame zstd
// stream on zstdWorkers goroutines (0: zstdframe.DefaultWorkers).
func decompressWith(r io.Reader, zstdWindow uint64, zstdWorkers int) (io.ReadCloser, Compression, error) {
	br := bufio.NewReaderSize(r, peekSize)
	head, err := br.Peek(peekSize)
	if err != nil && err != io.EOF && !errors.Is(err, bufio.ErrBufferFull) {
		return nil, None, fmt.Errorf("reading: %w", err)
	}
	c := Sniff(head)
	switch c {
	case None:
		return &decoder{r: br}, None, nil
	case Gzip:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, c, wrapDecodeErr(c, err)
		}
		return &decoder{r: zr, c: c, close: zr.Close}, c, nil
	case Zstd:
		if err := zstdframe.CheckWindow(head, zstdWindow); err != nil {
			return nil, c, err
		}
		// Frame by frame, on several goroutines when the stream has many
		// small frames; as one stream otherwise (zstdframe.Reader).
		zr := zstdframe.NewReader(br, zstdWindow, zstdWorkers)
		return &decoder{r: zr, c: c, close: zr.Close}, c, nil
	case Bzip2:
		return &decoder{r: bzip2.NewReader(br), c: c}, c, nil
	case Xz:
		if err := checkXzDict(head, xzMaxDict); err != nil {
			return nil, c, err
		}
		// The decoder caps every block's dictionary, in every stream, not
		// only the first block's that checkXzDict reads: a later one that
		// declares more is refused before it is allocated. It also says a
		// stream cut off anywhere, even at a block boundary, is cut off.
		xr, err := xzdec.NewReader(br, xzMaxDict)
		if err != nil {
			return nil, c, xzError(err)
		}
		return &decoder{r: xr, c: c}, c, nil
	case Lz4:
		lr := lz4.NewReader(br)
		// One block at a time: the reader has no Close, so it must not own
		// goroutines that a caller who stops reading early would leak.
		if err := lr.Apply(lz4.ConcurrencyOption(1)); err != nil {
			return nil, c, wrapDecodeErr(c, err)
		}
		return &decoder{r: lr, c: c}, c, nil
	}
	return nil, c, fmt.Errorf("unsupported compression %s", c)
}

const xzHint = " (compress it again with a dictionary of 128 MiB or less: xz -9 uses 64 MiB)"

// checkXzDict refuses an xz stream whose first block's LZMA2 filter, as far
// as head shows, declares a dictionary larger than limit, saying the size it
// declares before the decoder is made. The decoder itself refuses any later
// block, in this stream or a later one, that declares more.
func checkXzDict(head []byte, limit int64) error {
	const streamHeader = 12
	if len(head) < streamHeader+2 || head[streamHeader] == 0 {
		return nil // no block: an empty stream, or too short to tell
	}
	blk := head[streamHeader:]
	size := (int(blk[0]) + 1) * 4
	if len(blk) < size {
		return nil
	}
	blk = blk[:size]
	flags := blk[1]
	pos := 2
	varint := func() (uint64, bool) {
		var v uint64
		for i := 0; i < 9 && pos < len(blk); i++ {
			b := blk[pos]
			pos++
			v |= uint64(b&0x7f) << (7 * i)
			if b&0x80 == 0 {
				return v, true
			}
		}
		return 0, false
	}
	for _, bit := range []byte{0x40, 0x80} { // compressed, uncompressed size
		if flags&bit != 0 {
			if _, ok := varint(); !ok {
				return nil
			}
		}
	}
	for range int(flags&3) + 1 {
		id, ok := varint()
		if !ok {
			return nil
		}
		n, ok := varint()
		if !ok || n > uint64(len(blk)-pos) {
			return nil
		}
		props := blk[pos : pos+int(n)]
		pos += int(n)
		if id == 0x21 && len(props) == 1 { // LZMA2
			dict, ok := lzma2Dict(props[0])
			if !ok {
				return nil // the decoder reports it
			}
			if dict > limit {
				return fmt.Errorf("xz: the stream declares a %s dictionary, more than the %s holdfast decodes%s", units.Whole(uint64(dict)), units.Whole(uint64(limit)), xzHint)
			}
		}
	}
	return nil
}

// lzma2Dict is the dictionary size an LZMA2 filter's property byte declares
// (the .xz format, section 5.3.1: 40 is 4 GiB less a byte, above it none).
func lzma2Dict(p byte) (int64, bool) {
	switch {
	case p > 40:
		return 0, false
	case p == 40:
		return 1<<32 - 1, true
	}
	return int64(2|p&1) << (p/2 + 11), true
}

// decoder wraps a decompressing reader: it names the compression in errors,
// makes them sticky and releases the decoder on Close.
type decoder struct {
	r     io.Reader
	c     Compression // empty for None
	close func() error
	err   error // sticky
}

func (d *decoder) Read(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	n, err := d.r.Read(p)
	if err != nil && err != io.EOF {
		if d.c == Xz {
			err = xzError(err)
		} else if d.c != "" && d.c != None {
			// zstdframe.Reader's errors name zstd already.
			err = wrapDecodeErr(d.c, err)
		}
		d.err = err
	}
	return n, err
}

// Lend passes on the decoder's own buffer of what comes next, when it has
// one (blockLender).
func (d *decoder) Lend() ([]byte, func(), bool) {
	l, ok := d.r.(blockLender)
	if !ok || d.err != nil {
		return nil, nil, false
	}
	return l.Lend()
}

func (d *decoder) Close() error {
	if d.close == nil {
		return nil
	}
	f := d.close
	d.close = nil
	if d.err == nil {
		d.err = errors.New("read after close")
	}
	if err := f(); err != nil && d.c != "" {
		return wrapDecodeErr(d.c, err)
	}
	return nil
}

// xzError says an xz decoder's error as holdfast does: a dictionary past the
// cap with the cap and the hint, a cut-off stream as one.
func xzError(err error) error {
	switch {
	case errors.Is(err, xzdec.ErrMemlimit):
		return fmt.Errorf("xz: a block declares a dictionary larger than the %s holdfast decodes%s", units.Whole(xzMaxDict), xzHint)
	case errors.Is(err, xzdec.ErrBuf), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("xz: %w", io.ErrUnexpectedEOF)
	}
	return wrapDecodeErr(Xz, err)
}

// wrapDecodeErr prefixes a decoder's error with the compression's name,
// unless the library already did.
func wrapDecodeErr(c Compression, err error) error {
	if strings.HasPrefix(err.Error(), string(c)+":") {
		return err
	}
	return fmt.Errorf("%s: %w", c, err)
}

// Probe reports the compression of a stream and whether, once decompressed, it
// starts like a tar archive (a header block IsTarHeader accepts, or the zero
// block of an empty archive). It reads at most a few KiB of decompressed
// data. A file that is not compressed and not a tar is (None, false, nil); a
// decoding error is returned as such.
func Probe(r io.Reader) (Compression, bool, error) {
	rc, c, err := Decompress(r)
	if err != nil {
		return c, false, err
	}
	defer rc.Close()
	blk, err := readUpTo(rc, blockSize)
	if err != nil {
		return c, false, err
	}
	return c, isZeroBlock(blk) || IsTarHeader(blk), nil
}

// blockSize is the size of a tar block: a header, a piece of an entry's data
// with its padding, or one of the zero blocks that end an archive.
const blockSize = 512

// IsTarHeader reports whether blk starts like a tar header: the "ustar"
// magic at offset 257 (POSIX ustar, pax and GNU headers, as GNU tar and Go's
// archive/tar, so docker save and ctr export, write them), or a whole
// 512-byte block whose checksum field matches its bytes (their sum with the
// field counted as spaces, as unsigned bytes or as the signed bytes some old
// writers summed), as a pre-POSIX (V7) header has. A file that starts so is
// taken for a tar: reading it says what is wrong with it, which skipping it
// would not. A zero block is not a header (see isZeroBlock).
func IsTarHeader(blk []byte) bool {
	if len(blk) >= 262 && bytes.HasPrefix(blk[257:], []byte("ustar")) {
		return true
	}
	if len(blk) < blockSize {
		return false
	}
	field := strings.Trim(string(blk[148:156]), " \x00")
	if field == "" {
		return false
	}
	var want int64
	for _, ch := range field {
		if ch < '0' || ch > '7' {
			return false
		}
		want = want*8 + int64(ch-'0')
	}
	var unsigned, signed int64
	for i, b := range blk[:blockSize] {
		if i >= 148 && i < 156 {
			b = ' '
		}
		unsigned += int64(b)
		signed += int64(int8(b))
	}
	return want == unsigned || want == signed
}

// isZeroBlock reports whether blk starts with a block of zeros: the first of
// the two that end a tar archive, and so the start of an empty one.
func isZeroBlock(blk []byte) bool {
	if len(blk) < blockSize {
		return false
	}
	for _, b := range blk[:blockSize] {
		if b != 0 {
			return false
		}
	}
	return true
}

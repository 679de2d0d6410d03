package archive

import (
	"context"
	"fmt"
	"io"

	"github.com/holdfast-project/holdfast/internal/archive/zstdframe"
)

// maxTrailing is how much decompressed data may follow the end of a tar archive.
const maxTrailing = 16 << 20

// input is the stream the tar reader reads.
type input struct {
	comp     Compression
	tar      io.Reader       // *countingReader, or *seekCounter when seekable
	reads    *countingReader // bytes the tar reader read
	seekable bool            // uncompressed or seekable zstd, read from a file: the tar reader seeks past skipped entries
	sc       *seekCounter    // when seekable
	raw      *countingReader // compressed input (nil when seekable)
	dec      *decoder        // nil when seekable
	ahead    *aheadReader    // reads dec ahead of the tar reader (nil when seekable)
	rs       io.ReadSeeker   // when seekable
	start    int64           // offset of rs at the start
	ra       io.ReaderAt     // when seekable and uncompressed, if r is one: deferred writes read it
	sz       *zstdframe.File // seekable zstd: rs reads its decoded bytes
	szr      io.Closer       // when sz: rs, the tar reader's reader of its bytes
}

// openInput prepares r for the tar reader: an uncompressed io.ReadSeeker is
// read as it is, so that skipped entries are seeked over, and so is a
// seekable zstd file, by its seek table, when byTable (the walk defers
// writes: it is their decoding that goes on several cores); anything else is
// decompressed, the decoder running ahead of the reader.
func openInput(r io.Reader, lim limits, byTable bool) (*input, error) {
	if rs, ok := r.(io.ReadSeeker); ok {
		if start, err := rs.Seek(0, io.SeekCurrent); err == nil {
			head, err := readUpTo(rs, peekSize)
			if err != nil {
				return nil, fmt.Errorf("reading: %w", err)
			}
			if _, err := rs.Seek(start, io.SeekStart); err != nil {
				return nil, fmt.Errorf("seeking: %w", err)
			}
			ra, _ := r.(io.ReaderAt)
			switch Sniff(head) {
			case None:
				return seekableInput(None, rs, start, ra), nil
			case Zstd:
				if !byTable {
					break
				}
				if in := openSeekZstdInput(rs, start, ra, lim); in != nil {
					return in, nil
				}
			}
		}
	}
	raw := &countingReader{r: r}
	rc, c, err := decompress(raw, lim.zstdWindow)
	if err != nil {
		return nil, err
	}
	ahead := newAheadReader(rc)
	reads := &countingReader{r: ahead}
	return &input{comp: c, tar: reads, reads: reads, raw: raw, dec: rc.(*decoder), ahead: ahead}, nil
}

// seekableInput reads rs, from start on, as it is.
func seekableInput(c Compression, rs io.ReadSeeker, start int64, ra io.ReaderAt) *input {
	sc := &seekCounter{countingReader: countingReader{r: rs}, s: rs, pos: start}
	return &input{comp: c, tar: sc, reads: &sc.countingReader, seekable: true, sc: sc, rs: rs, start: start, ra: ra}
}

// openSeekZstdInput reads the zstd file rs, from start on, by its seek
// table, or returns nil if it is not read so (zstdframe.OpenFile).
func openSeekZstdInput(rs io.Seeker, start int64, ra io.ReaderAt, lim limits) *input {
	if ra == nil {
		return nil
	}
	end, err := rs.Seek(0, io.SeekEnd)
	if _, serr := rs.Seek(start, io.SeekStart); err != nil || serr != nil {
		return nil
	}
	z := zstdframe.OpenFile(io.NewSectionReader(ra, start, end-start), end-start, lim.zstdWindow, zstdframe.DefaultWorkers())
	if z == nil {
		return nil
	}
	r := z.Section(0, z.ContentSize())
	in := seekableInput(Zstd, r, 0, nil)
	in.sz, in.szr = z, r
	return in
}

// reopens reports whether the bytes of an entry can be read again, from
// another goroutine: writes can be deferred.
func (in *input) reopens() bool { return in.ra != nil || in.sz != nil }

// reopen reads size bytes at offset off again (see reopens).
func (in *input) reopen(off, size int64) reopener {
	if in.sz != nil {
		return in.sz.Opener(off, size)
	}
	return sectionOpener(in.ra, off, size)
}

// endsBefore reports whether a seekable input ends before offset off.
func (in *input) endsBefore(off int64) bool {
	end, err := in.rs.Seek(0, io.SeekEnd)
	return err == nil && end < off
}

// decodeErr is the error that ended the decoder, if any (not io.EOF).
func (in *input) decodeErr() error {
	if in.sz != nil {
		return in.sz.Err()
	}
	if in.ahead == nil {
		return nil
	}
	if err := in.ahead.Err(); err != io.EOF {
		return err
	}
	return nil
}

// verify decodes what no write decoded of a seekable zstd input, checking
// it as a stream would be.
func (in *input) verify(ctx context.Context) error {
	if in.sz == nil {
		return nil
	}
	return in.sz.Verify(ctx, zstdframe.DefaultWorkers(), in.sz.ContentSize())
}

// streamErr prefers the decoder's own error: when the compressed stream is
// broken, that is the cause, whatever the tar reader or the store made of it.
// A seekable zstd file is first decoded as far as a stream would have been
// (the tar reader may have seeked over a frame whose size the table lies
// about, and found no header where it looked).
func (in *input) streamErr(err error) error {
	if in.sz != nil && in.sz.Err() == nil {
		in.sz.Verify(context.Background(), zstdframe.DefaultWorkers(), in.sc.pos)
	}
	return in.writeErr(err)
}

// writeErr is streamErr for the deferred writes, after the walk: a frame a
// writer found broken is the cause; nothing more is decoded to look for one.
func (in *input) writeErr(err error) error {
	if e := in.decodeErr(); e != nil {
		return e
	}
	return err
}

// finish reads to the end of the stream, where decompressors check their
// trailers (checksums, sizes), and returns the size of the archive as stored.
//
// What follows the end-of-archive marker is padding (tar writes whole
// records, 10 KiB by default) that a decompressor still has to produce:
// more than maxTrailing of it is refused, so that a small compressed file
// cannot keep a pass decoding gigabytes of nothing.
func (in *input) finish() (int64, error) {
	if in.sz != nil {
		if in.sz.ContentSize()-in.sc.pos > maxTrailing {
			return 0, fmt.Errorf("more than %d MiB of data after the end of the tar archive", maxTrailing>>20)
		}
		// The tar reader is done: its frame's buffers go before the
		// deferred writes take theirs.
		in.szr.Close()
		return in.sz.Size(), nil
	}
	if in.seekable {
		end, err := in.rs.Seek(0, io.SeekEnd)
		if err != nil {
			return 0, fmt.Errorf("seeking: %w", err)
		}
		return end - in.start, nil
	}
	n, err := io.Copy(io.Discard, io.LimitReader(in.ahead, maxTrailing+1))
	if err != nil {
		return 0, fmt.Errorf("reading past the end of the tar archive: %w", err)
	}
	if n > maxTrailing {
		return 0, fmt.Errorf("more than %d MiB of data after the end of the tar archive", maxTrailing>>20)
	}
	return in.raw.n, nil
}

// close stops the read-ahead goroutine and releases the decoder.
func (in *input) close() {
	if in.ahead != nil {
		in.ahead.Close()
	}
	if in.dec != nil {
		in.dec.Close()
	}
	if in.sz != nil {
		in.sz.Close()
	}
}

// readUpTo reads the first n bytes of r, or all of r if it ends sooner: a
// short stream is no error, only fewer bytes.
func readUpTo(r io.Reader, n int) ([]byte, error) {
	b := make([]byte, n)
	k, err := io.ReadFull(r, b)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		err = nil
	}
	return b[:k], err
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// seekCounter counts the bytes read, lets the tar reader seek and knows
// where it is.
type seekCounter struct {
	countingReader
	s   io.Seeker
	pos int64 // offset in s
}

func (c *seekCounter) Read(p []byte) (int, error) {
	n, err := c.countingReader.Read(p)
	c.pos += int64(n)
	return n, err
}

func (c *seekCounter) Seek(offset int64, whence int) (int64, error) {
	pos, err := c.s.Seek(offset, whence)
	if err == nil {
		c.pos = pos
	}
	return pos, err
}

package archive

import (
	"io"
	"sync"
)

// aheadBlocks and aheadBlockSize bound what an aheadReader holds: 4 MiB.
const (
	aheadBlocks    = 4
	aheadBlockSize = 1 << 20
)

// aheadReader decompresses ahead of its reader, in a goroutine, into a few
// buffers. A compressed archive is one stream, and each blob's bytes go to
// the store in round trips: without it the decoder would wait for every round
// trip and the store for every block decoded, each using one core in turn.
//
// A decoder that decodes ahead on its own (the frames of a multi-frame zstd
// stream, decoded whole on several goroutines) lends its buffers instead
// (blockLender): they are passed on as they are, not copied.
type aheadReader struct {
	full chan aheadBlock // filled buffers, in order; closed at the end of the stream
	free chan []byte
	stop chan struct{}
	done chan struct{}
	cur  []byte     // the unread part of the buffer being read
	buf  aheadBlock // that buffer, to give back

	mu  sync.Mutex
	err error // what ended the stream (io.EOF at its end); set before full closes
}

// aheadBlock is a buffer of decoded bytes: the read-ahead's own, or lent by
// the decoder and given back with release.
type aheadBlock struct {
	b       []byte
	release func()
}

// blockLender is a decoder that can hand on what it decoded in its own
// buffer rather than copy it into the caller's.
type blockLender interface {
	// Lend returns the next bytes of the stream, at least one, in a buffer
	// the caller reads and then gives back by calling release once, from
	// any goroutine. ok is false when the next bytes are not in such a
	// buffer, at the end of the stream and on an error: Read tells.
	Lend() (b []byte, release func(), ok bool)
}

func newAheadReader(r io.Reader) *aheadReader {
	a := &aheadReader{
		full: make(chan aheadBlock, aheadBlocks),
		free: make(chan []byte, aheadBlocks),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	for range aheadBlocks {
		a.free <- nil // made when first needed: a lending decoder needs none
	}
	go a.fill(r)
	return a
}

func (a *aheadReader) fill(r io.Reader) {
	defer close(a.done)
	defer close(a.full)
	lender, _ := r.(blockLender)
	for {
		select {
		case <-a.stop:
			return
		default:
		}
		if lender != nil {
			if b, release, ok := lender.Lend(); ok {
				select {
				case a.full <- aheadBlock{b: b, release: release}:
				case <-a.stop:
					release()
					return
				}
				continue
			}
		}
		var b []byte
		select {
		case b = <-a.free:
		case <-a.stop:
			return
		}
		if b == nil {
			b = make([]byte, aheadBlockSize)
		}
		n, err := io.ReadFull(r, b)
		if n > 0 {
			select {
			case a.full <- aheadBlock{b: b[:n]}:
			case <-a.stop:
				return
			}
		}
		if err != nil {
			if err == io.ErrUnexpectedEOF {
				err = io.EOF // a short last block: r ended cleanly
			}
			a.mu.Lock()
			a.err = err
			a.mu.Unlock()
			return
		}
	}
}

func (a *aheadReader) Read(p []byte) (int, error) {
	for len(a.cur) == 0 {
		a.giveBack()
		b, ok := <-a.full
		if !ok {
			return 0, a.Err()
		}
		a.cur, a.buf = b.b, b
	}
	n := copy(p, a.cur)
	a.cur = a.cur[n:]
	return n, nil
}

// giveBack gives the buffer just read back to where it came from.
func (a *aheadReader) giveBack() {
	switch {
	case a.buf.release != nil:
		a.buf.release()
	case a.buf.b != nil:
		a.free <- a.buf.b[:cap(a.buf.b)]
	}
	a.buf = aheadBlock{}
}

// Err is what ended the stream so far: nil while it goes on, io.EOF at its
// end, else the decoder's error (which the reader meets after the bytes
// decoded before it).
func (a *aheadReader) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Close stops the goroutine and waits for it: the decoder is no longer read
// once Close returns. Lent buffers not read yet are given back on the way: a
// lending decoder may be waiting for one to decode into.
func (a *aheadReader) Close() {
	select {
	case <-a.stop:
	default:
		close(a.stop)
	}
	for b := range a.full {
		if b.release != nil {
			b.release()
		}
	}
	<-a.done
}

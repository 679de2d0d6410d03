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
type aheadReader struct {
	full chan []byte // filled buffers, in order; closed at the end of the stream
	free chan []byte
	stop chan struct{}
	done chan struct{}
	cur  []byte // the unread part of the buffer being read
	buf  []byte // that buffer, to give back

	mu  sync.Mutex
	err error // what ended the stream (io.EOF at its end); set before full closes
}

func newAheadReader(r io.Reader) *aheadReader {
	a := &aheadReader{
		full: make(chan []byte, aheadBlocks),
		free: make(chan []byte, aheadBlocks),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	for range aheadBlocks {
		a.free <- make([]byte, aheadBlockSize)
	}
	go a.fill(r)
	return a
}

func (a *aheadReader) fill(r io.Reader) {
	defer close(a.done)
	defer close(a.full)
	for {
		var b []byte
		select {
		case b = <-a.free:
		case <-a.stop:
			return
		}
		n, err := io.ReadFull(r, b)
		if n > 0 {
			select {
			case a.full <- b[:n]:
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
		if a.buf != nil {
			a.free <- a.buf[:cap(a.buf)]
			a.buf = nil
		}
		b, ok := <-a.full
		if !ok {
			return 0, a.Err()
		}
		a.cur, a.buf = b, b
	}
	n := copy(p, a.cur)
	a.cur = a.cur[n:]
	return n, nil
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
// once Close returns.
func (a *aheadReader) Close() {
	select {
	case <-a.stop:
	default:
		close(a.stop)
	}
	<-a.done
}

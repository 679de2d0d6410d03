package archive

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

func TestAheadReaderKeepsBytesAndOrder(t *testing.T) {
	for _, size := range []int{0, 1, aheadBlockSize - 1, aheadBlockSize, 3*aheadBlockSize + aheadBlockSize/2, 2 * aheadBlocks * aheadBlockSize} {
		src := make([]byte, size)
		rng := rand.New(rand.NewPCG(uint64(size), 1))
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		// A source that returns odd-sized pieces, as decoders do.
		a := newAheadReader(&pieceReader{r: bytes.NewReader(src), max: 777_777})
		got, err := io.ReadAll(a)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if !bytes.Equal(got, src) {
			t.Fatalf("size %d: read %d bytes that differ from the source", size, len(got))
		}
		if err := a.Err(); err != io.EOF {
			t.Fatalf("size %d: Err() = %v, want io.EOF", size, err)
		}
		a.Close()
	}
}

func TestAheadReaderPassesTheErrorAfterTheBytes(t *testing.T) {
	boom := errors.New("zstd: corrupt block")
	src := bytes.Repeat([]byte("x"), aheadBlockSize+5)
	a := newAheadReader(io.MultiReader(bytes.NewReader(src), &errReader{err: boom}))
	defer a.Close()
	got, err := io.ReadAll(a)
	if !errors.Is(err, boom) {
		t.Fatalf("ReadAll error = %v, want %v", err, boom)
	}
	if !bytes.Equal(got, src) {
		t.Fatalf("read %d bytes before the error, want the %d decoded before it", len(got), len(src))
	}
	if !errors.Is(a.Err(), boom) {
		t.Fatalf("Err() = %v, want %v", a.Err(), boom)
	}
}

func TestAheadReaderCloseStopsReading(t *testing.T) {
	src := &countingZeros{}
	a := newAheadReader(src)
	readThenClose(t, a, "Close did not return while the source had more to give")
	n := src.n
	// Bounded: what the buffers hold plus the block being read at Close.
	if limit := int64(aheadBlocks+2) * aheadBlockSize; n > limit {
		t.Fatalf("read %d bytes of an endless source, more than %d", n, limit)
	}
	a.Close() // a second Close is harmless
}

type pieceReader struct {
	r   io.Reader
	max int
}

func (p *pieceReader) Read(b []byte) (int, error) {
	return p.r.Read(b[:min(len(b), p.max)])
}

type errReader struct{ err error }

func (e *errReader) Read([]byte) (int, error) { return 0, e.err }

// countingZeros is an endless source; n is only read after the reader's goroutine is done.
type countingZeros struct{ n int64 }

func (c *countingZeros) Read(b []byte) (int, error) {
	clear(b)
	c.n += int64(len(b))
	return len(b), nil
}

// lender lends pieces of src, each at most max bytes, with at most held of
// them out at once (Lend waits for a release, as a decoder waits for a
// buffer to decode into); every other call is a Read instead.
type lender struct {
	src      []byte
	max      int
	slots    chan struct{}
	calls    int
	mu       sync.Mutex
	released map[int]int // by offset: releases
}

func newLender(src []byte, max, held int) *lender {
	return &lender{src: src, max: max, slots: make(chan struct{}, held), released: map[int]int{}}
}

func (l *lender) Read(p []byte) (int, error) {
	if len(l.src) == 0 {
		return 0, io.EOF
	}
	n := copy(p, l.src[:min(len(l.src), l.max)])
	l.src = l.src[n:]
	return n, nil
}

func (l *lender) Lend() ([]byte, func(), bool) {
	l.calls++
	if len(l.src) == 0 || l.calls%2 == 0 {
		return nil, nil, false
	}
	l.slots <- struct{}{}
	key := len(l.src) // what is left: a piece's own
	b := l.src[:min(len(l.src), l.max)]
	l.src = l.src[len(b):]
	return b, func() {
		l.mu.Lock()
		l.released[key]++
		l.mu.Unlock()
		<-l.slots
	}, true
}

func TestAheadReaderPassesLentBlocks(t *testing.T) {
	src := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	l := newLender(src, 300_001, 3)
	a := newAheadReader(l)
	got, err := io.ReadAll(a)
	a.Close()
	if err != nil || !bytes.Equal(got, src) {
		t.Fatalf("%d of %d bytes, %v", len(got), len(src), err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.released) == 0 {
		t.Fatal("nothing was lent")
	}
	for k, n := range l.released {
		if n != 1 {
			t.Fatalf("a lent block (key %d) released %d times", k, n)
		}
	}
	if len(l.slots) != 0 {
		t.Fatalf("%d lent blocks never released", len(l.slots))
	}

	// Closed early, with the lender waiting for a release: Close gives the
	// blocks it holds back and returns.
	readThenClose(t, newAheadReader(newLender(src, 10_000, 2)), "Close hung while the lender waited for a release")
}

// readThenClose reads a few bytes of a, then closes it, failing with msg
// unless Close returns within 10 s.
func readThenClose(t *testing.T, a *aheadReader, msg string) {
	t.Helper()
	if _, err := io.ReadFull(a, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { a.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal(msg)
	}
}

package zstdframe

import (
	"errors"

	"github.com/klauspost/compress/zstd"
)

// The goroutines of Reader: the scanner (scan.go walks the
// frames) and the workers that decode them whole.

// decode decodes a buffered frame whole, or marks it to be streamed in order
// when its content turns out larger than its buffer.
func (z *Reader) decode(u *unit) {
	if cap(u.out) < u.bound {
		u.out = make([]byte, 0, u.bound)
	}
	// DecodeAll decodes into u.out and uses it as the frame's history, so a
	// window up to the limit costs nothing more; the cap on the content is
	// u.out's capacity (WithDecodeAllCapLimit), a cap on decoded memory
	// (WithDecoderMaxMemory) would also cap the window.
	out, err := z.dec.DecodeAll(u.comp, u.out[:0])
	switch {
	case errors.Is(err, zstd.ErrDecoderSizeExceeded), errors.Is(err, zstd.ErrWindowSizeExceeded):
		// More than the blocks said: the streaming decoder says what is
		// wrong with it, in order.
		u.stream = true
	case err != nil:
		u.err = frameErr(u.off, err)
	default:
		u.out = out
	}
}

// newDecoder makes the decoder of whole frames, if not made yet.
func (z *Reader) newDecoder() {
	if z.dec == nil {
		// The options are constants the decoder accepts. With no reader, it
		// starts no goroutine.
		z.dec, _ = zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(z.workers),
			zstd.WithDecoderMaxWindow(z.limit),
			zstd.WithDecodeAllCapLimit(true),
		)
	}
}

// start starts the scanner and the workers.
func (z *Reader) start() {
	z.newDecoder()
	z.started = true
	inFlight := cap(z.free)
	z.order = make(chan *unit, inFlight)
	z.work = make(chan *unit, inFlight)
	z.stop = make(chan struct{})
	// The units made so far (the frame being read, one lent) are among them.
	for ; z.units < inFlight; z.units++ {
		z.free <- &unit{}
	}
	z.wg.Add(1 + z.workers)
	go z.scanLoop()
	for range z.workers {
		go func() {
			defer z.wg.Done()
			for u := range z.work {
				z.decode(u)
				close(u.done)
			}
		}()
	}
}

// scanLoop scans unit after unit and hands each on, until the stream ends,
// fails or the reader stops.
func (z *Reader) scanLoop() {
	defer z.wg.Done()
	defer close(z.work)
	defer close(z.order)
	for {
		var u *unit
		select {
		case u = <-z.free:
		case <-z.stop:
			return
		}
		more, err := z.scan(u)
		if u.pipe != nil {
			// Handed on already; an error went through the pipe.
			if err != nil {
				return
			}
			continue
		}
		if err != nil {
			u.kind, u.err = errorUnit, err
			close(u.done)
			select {
			case z.order <- u:
			case <-z.stop:
			}
			return
		}
		if !more {
			return
		}
		if u.kind == frameUnit && !u.stream {
			select {
			case z.work <- u:
			case <-z.stop:
				return
			}
		} else {
			close(u.done)
		}
		select {
		case z.order <- u:
		case <-z.stop:
			return
		}
	}
}

// Close stops the scanner and the workers and waits for them; the stream is
// not read any more once it returns.
func (z *Reader) Close() error {
	if z.closed {
		return nil
	}
	z.closed = true
	if z.err == nil {
		z.err = errors.New("read after close")
	}
	if z.started {
		close(z.stop)
		// A scanner feeding a pipe waits for its reader: give up reading.
		if z.cur != nil && z.cur.pipe != nil {
			z.cur.pipe.CloseWithError(errClosed)
		}
		for u := range z.order {
			if u.pipe != nil {
				u.pipe.CloseWithError(errClosed)
			}
		}
		z.wg.Wait()
	}
	for _, d := range []*zstd.Decoder{z.dec, z.sdec, z.single} {
		if d != nil {
			d.Close()
		}
	}
	return nil
}

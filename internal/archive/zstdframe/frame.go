// Package zstdframe reads and writes zstd streams frame by frame: the
// seekable format holdfast export writes (Writer: independent frames and a
// seek table), a stream of frames decoded on several cores as it is read
// (Reader), and a seekable file read by its seek table (File). Frame headers
// are read with klauspost/compress's zstd.Header; every size a stream
// declares is bounded before it is allocated, and errors name the frame
// they are about (Error).
package zstdframe

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/holdfast-project/holdfast/internal/units"
)

// Frame is one frame of a stream, as a seek table says it or as a reader
// found it.
type Frame struct {
	Off    int64  // where it starts in the compressed stream
	Comp   uint64 // its compressed size
	Size   uint64 // its content size
	Sum    uint32 // its checksum field, the low 32 bits of its content's XXH64, if HasSum
	HasSum bool
}

// hint is what an error about a window too large tells to do.
const hint = " (compress it again with a window of 128 MiB or less: zstd --long=27)"

// DefaultWorkers is how many frames are decoded at once by default.
// Four are enough to outrun what reads the decoded stream (hashing and
// writing it); more would only hold more memory.
func DefaultWorkers() int { return min(runtime.GOMAXPROCS(0), 4) }

// Error is an error about one frame or seek table: its message names where
// it is, and the reader's errors are said as they are.
type Error struct {
	msg string
	err error
}

func (e *Error) Error() string {
	if e.err == nil {
		return e.msg
	}
	return e.msg + ": " + e.err.Error()
}

func (e *Error) Unwrap() error { return e.err }

// frameErr says err happened in the frame at off. A stream cut off is
// "zstd: unexpected EOF", as it always was: where it stops is the file's
// end, which its size already says.
func frameErr(off int64, err error) error {
	var fe *Error
	if errors.As(err, &fe) {
		return err
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return &Error{msg: "zstd", err: io.ErrUnexpectedEOF}
	}
	return &Error{msg: fmt.Sprintf("zstd: frame at offset %d", off), err: err}
}

func markerErr(format string, args ...any) error {
	return &Error{msg: fmt.Sprintf(format, args...)}
}

// window is the window a frame header declares: its content size when it
// is a single segment.
func window(h *zstd.Header) uint64 {
	if h.SingleSegment {
		return h.FrameContentSize
	}
	return h.WindowSize
}

// CheckWindow refuses a zstd stream whose first frame (after skippable
// frames, as far as head shows) declares a window larger than limit: the
// decoder would allocate it before decoding a byte. Later frames are checked
// as the Reader meets them.
func CheckWindow(head []byte, limit uint64) error {
	var h zstd.Header
	for {
		if err := h.Decode(head); err != nil {
			return nil // the decoder reports what is wrong with it
		}
		if !h.Skippable {
			break
		}
		n := uint64(h.HeaderSize) + uint64(h.SkippableSize)
		if n >= uint64(len(head)) {
			return nil
		}
		head = head[n:]
	}
	if w := window(&h); w > limit {
		return fmt.Errorf("zstd: a frame declares a %s window, more than the %s holdfast decodes%s", units.Whole(w), units.Whole(limit), hint)
	}
	return nil
}

// say is a Reader's error as holdfast says it: an error about a frame as it
// is, a window or a frame too large for the limit with the limit and the
// hint, any other with "zstd: " in front.
func say(err error, limit uint64) error {
	var fe *Error
	switch {
	case errors.As(err, &fe):
		return err
	case errors.Is(err, zstd.ErrWindowSizeExceeded), errors.Is(err, zstd.ErrDecoderSizeExceeded):
		return fmt.Errorf("zstd: a frame declares a window larger than the %s holdfast decodes%s: %w", units.Whole(limit), hint, err)
	}
	return prefixed(err)
}

// prefixed is err with "zstd: " in front, unless the decoder put it there.
func prefixed(err error) error {
	if strings.HasPrefix(err.Error(), "zstd:") {
		return err
	}
	return fmt.Errorf("zstd: %w", err)
}

// Package files reads what a file may hold up to a limit: a larger one is
// refused once the limit is passed, never read whole. Files are opened as
// regular files only (Open): a named pipe, a device or a directory given
// where a file is read is refused at once, never waited on or read without
// end.
package files

import (
	"errors"
	"io"
)

// ErrTooLarge says a read found more than its limit.
var ErrTooLarge = errors.New("larger than the limit")

// ReadAll reads r to its end if it holds at most limit bytes; past the limit
// it stops and returns ErrTooLarge, for the caller to say which bound.
func ReadAll(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, ErrTooLarge
	}
	return b, nil
}

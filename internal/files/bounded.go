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

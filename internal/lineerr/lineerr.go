// Package lineerr is the error of one line of a file an operator writes (a
// pull list, a pin list, a signature policy): it names the file and the line;
// and Cause, the error of a file without the path its caller names already.
package lineerr

import (
	"errors"
	"fmt"
	"io/fs"
)

// Error is what is wrong with one line of a file.
type Error struct {
	Path string
	Line int // from 1
	Err  error
}

func (e Error) Error() string { return fmt.Sprintf("%s:%d: %v", e.Path, e.Line, e.Err) }

func (e Error) Unwrap() error { return e.Err }

// Cause drops the operation and path an *fs.PathError repeats, for a caller
// that names the file itself.
func Cause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

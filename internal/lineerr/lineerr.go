// Package lineerr is the error of one line of a file an operator writes (a
// pull list, a pin list, a signature policy): it names the file and the line.
package lineerr

import "fmt"

// Error is what is wrong with one line of a file.
type Error struct {
	Path string
	Line int // from 1
	Err  error
}

func (e Error) Error() string { return fmt.Sprintf("%s:%d: %v", e.Path, e.Line, e.Err) }

func (e Error) Unwrap() error { return e.Err }

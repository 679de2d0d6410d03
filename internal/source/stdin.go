package source

import (
	"fmt"
	"io/fs"
)

// IsStdin says whether an operator's path names standard input: "-", or
// /dev/stdin and the other names of its descriptor (/dev/fd/0,
// /proc/self/fd/0), which are read as "-" is, whatever standard input is.
func IsStdin(path string) bool {
	switch path {
	case "-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0":
		return true
	}
	return false
}

// nonRegular is the error for a path that is neither a directory nor a
// regular file. A pipe is no archive holdfast can name and identify: it is
// read as standard input, "-".
func nonRegular(path string, mode fs.FileMode) error {
	var what string
	switch {
	case mode&fs.ModeNamedPipe != 0:
		what = "a named pipe"
	case mode&fs.ModeSocket != 0:
		what = "a socket"
	case mode&fs.ModeDevice != 0:
		what = "a device"
	default:
		return fmt.Errorf("%s is not a regular file", path)
	}
	return fmt.Errorf("%s is not a regular file but %s: to read an archive from a pipe, give - and connect the pipe to standard input", path, what)
}

package archive

import (
	"os"

	"github.com/holdfast-project/holdfast/internal/files"
)

// ErrNotRegular is the cause Open gives for anything but a regular file.
var ErrNotRegular = files.ErrNotRegular

// Open opens a regular file for reading (files.Open). The open itself
// cannot block (it is made non-blocking, then checked with fstat), and
// anything but a regular file is refused with ErrNotRegular: a file swapped
// for a named pipe after a scan never hangs a pass.
func Open(path string) (*os.File, error) { return files.Open(path) }

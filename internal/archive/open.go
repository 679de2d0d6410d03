package archive

import (
	"io/fs"
	"os"
	"syscall"

	"github.com/holdfast-project/holdfast/internal/files"
)

// ErrNotRegular is the cause Open gives for anything but a regular file.
var ErrNotRegular = files.ErrNotRegular

// Open opens a regular file for reading (files.Open). The open itself
// cannot block (it is made non-blocking, then checked with fstat), and
// anything but a regular file is refused with ErrNotRegular: a file swapped
// for a named pipe after a scan never hangs a pass.
func Open(path string) (*os.File, error) { return files.Open(path) }

// openIn is Open for a file under root (a layout dir): name may not lead out
// of root, not even through a symlink (os.Root refuses it with an error that
// says the path escapes).
func openIn(root *os.Root, name string) (*os.File, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: ErrNotRegular}
	}
	if err := syscall.SetNonblock(int(f.Fd()), false); err != nil {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return f, nil
}

package files

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is the cause Open gives for anything but a regular file.
var ErrNotRegular = errors.New("not a regular file")

// notRegular is ErrNotRegular with the kind of file found.
type notRegular struct{ kind string }

func (e notRegular) Error() string        { return "not a regular file: " + e.kind }
func (e notRegular) Is(target error) bool { return target == ErrNotRegular }

// Open opens a regular file for reading, following symlinks. The open
// cannot block: it is made with O_NONBLOCK, so that a named pipe with no
// writer, or a device, cannot hold it; the file is then checked with fstat
// (the file opened, not the name, which may change meanwhile), and
// anything but a regular file is refused with ErrNotRegular. The file is
// made blocking again for its reads.
func Open(path string) (*os.File, error) {
	return open(path, 0)
}

// OpenNoFollow is Open for a file that must not be a symbolic link: a
// link, dangling or not, is refused with an error that wraps
// syscall.ELOOP, and nothing it points to is opened.
func OpenNoFollow(path string) (*os.File, error) {
	return open(path, syscall.O_NOFOLLOW)
}

// open is Open with flags added to the open's.
func open(path string, flags int) (*os.File, error) {
	var fd int
	var err error
	for {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC|flags, 0)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	if err := regular(fd, path); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// OpenIn is Open for the file name under root: name may not lead out of
// root, not even through a symlink (os.Root refuses it with an error that
// says the path escapes).
func OpenIn(root *os.Root, name string) (*os.File, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if err := regular(int(f.Fd()), name); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// regular checks with fstat that fd, opened non-blocking as path, is a
// regular file (else ErrNotRegular, with the kind of file found), and makes
// it blocking again for its reads.
func regular(fd int, path string) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return &fs.PathError{Op: "open", Path: path, Err: notRegular{fileKind(st.Mode)}}
	}
	if err := syscall.SetNonblock(fd, false); err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return nil
}

// ReadFile reads the regular file at path (see Open) if it holds at most
// limit bytes; past the limit it stops and returns ErrTooLarge, for the
// caller to say which bound. Other errors are *fs.PathError.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := ReadAll(f, limit)
	if err != nil && !errors.Is(err, ErrTooLarge) {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	return data, err
}

// fileKind names a type of file that is not regular.
func fileKind(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return "a directory"
	case syscall.S_IFIFO:
		return "a named pipe"
	case syscall.S_IFSOCK:
		return "a socket"
	case syscall.S_IFCHR:
		return "a character device"
	case syscall.S_IFBLK:
		return "a block device"
	}
	return fmt.Sprintf("file type %#o", mode&syscall.S_IFMT)
}

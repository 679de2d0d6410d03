package files

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// WriteFile writes data to a temp file beside path, syncs it, renames it
// into place and syncs the directory: once it returns nil, the new content
// survives a crash.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	if err := writeTemp(path, data, perm, true); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// ReplaceFile is WriteFile without the syncs, for files that need not
// survive a crash: readers see the old content or the new, never a part.
func ReplaceFile(path string, data []byte, perm os.FileMode) error {
	return writeTemp(path, data, perm, false)
}

// SyncDir makes the entries of dir (renames, links, removals) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

// writeTemp writes data to a new temp file beside path (".name.*.tmp") and
// renames it over path; durable syncs the file first.
func writeTemp(path string, data []byte, perm os.FileMode, durable bool) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := fill(tmp, data, perm, durable); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// fill writes data to f, gives it perm whatever the umask, syncs it when
// durable, and closes it.
func fill(f *os.File, data []byte, perm os.FileMode, durable bool) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// WriteFileAt is WriteFile for the entry name of the directory open as
// dir, made as a new file there (".name.<random>.tmp", never through a
// link, never over another file) and renamed over name, both relative to
// dir: whoever may rename what lies above dir cannot send the write
// elsewhere. The file is synced; the directory is not.
func WriteFileAt(dir int, name string, data []byte, perm os.FileMode) error {
	var random [8]byte
	if _, err := rand.Read(random[:]); err != nil {
		return err
	}
	tmp := "." + name + "." + hex.EncodeToString(random[:]) + ".tmp"
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm))
	if err != nil {
		return err
	}
	err = fill(os.NewFile(uintptr(fd), tmp), data, perm, true)
	if err == nil {
		err = unix.Renameat(dir, tmp, dir, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dir, tmp, 0)
		return err
	}
	return nil
}

// Pending is a file being written under a temp name beside its path
// (".name.*.partial"), given its name by Commit, removed by Abort: a reader
// of path never sees a part of it.
type Pending struct {
	*os.File
	path string
	done bool
}

// Create starts a Pending file for path.
func Create(path string) (*Pending, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.partial")
	if err != nil {
		return nil, err
	}
	return &Pending{File: f, path: path}, nil
}

// Commit gives the file perm, syncs it, renames it to its path and syncs
// the directory as far as it can: once it returns nil, the file is whole
// under its name.
func (p *Pending) Commit(perm os.FileMode) error {
	if p.done {
		return errors.New("committing " + p.path + ": already ended")
	}
	p.done = true
	tmp := p.Name()
	err := p.Chmod(perm)
	if err == nil {
		err = p.Sync()
	}
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p.path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	_ = SyncDir(filepath.Dir(p.path))
	return nil
}

// Abort removes the temp file unless Commit has been called.
func (p *Pending) Abort() {
	if p.done {
		return
	}
	p.done = true
	p.Close()
	os.Remove(p.Name())
}

package registries

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/holdfast-project/holdfast/internal/files"
)

// hostsName is the file containerd reads in each registry dir.
const hostsName = "hosts.toml"

// WriteOptions tune Write.
type WriteOptions struct {
	// Check judges a directory before Write writes into it: the hosts dir
	// (or, while it does not exist, the nearest directory above it, where it
	// is made) and each registry dir that gets or loses a hosts.toml. Its
	// error refuses the whole write. Nil judges none.
	Check func(dir string) error
}

// Result is what Write did, by registry dir name, each list sorted.
type Result struct {
	Written []string
	Removed []string
	// Skipped are the registries given whose hosts.toml holdfast did not
	// write (it lacks Marker, or it is not a regular file): each is kept as
	// it is, and the registry goes without what the files had for it.
	Skipped []string
}

// RefusedError is Write's refusal of the hosts dir: a directory others may
// write (WriteOptions.Check), or a symlink where a registry dir should be.
// Nothing was written.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }

func (e *RefusedError) Unwrap() error { return e.Err }

// Write writes the hosts.toml files into dir, one registry dir each, and
// removes the ones it wrote before that files no longer has. A hosts.toml
// it did not write is never overwritten or removed (Result.Skipped).
//
// No write follows a symlink: a registry dir is opened without following
// one (a registry dir that is a link refuses the write), each hosts.toml is
// written to a new file of a random name, created exclusively, and renamed
// over the old one in the same dir, and a removal unlinks the name itself.
// Everything is judged before anything is written, so a refusal leaves dir
// as it was. Registries are written in the order of their names.
func Write(dir string, files map[string]string, opts WriteOptions) (Result, error) {
	p, err := planWrite(dir, files, opts.Check)
	if err != nil {
		return Result{}, err
	}
	defer p.close()
	if err := p.apply(); err != nil {
		return Result{}, err
	}
	return p.res, nil
}

// writePlan is what Write will do, judged before it does any of it.
type writePlan struct {
	given string // the hosts dir as given, made absolute
	dir   string // where it resolved to; "" until apply makes it
	root  int    // dir, open; -1 until then
	check func(string) error
	files map[string]string
	res   Result
}

// hostsState is what a registry dir holds.
type hostsState int

const (
	absent hostsState = iota // no registry dir, or no hosts.toml in it
	ours                     // a hosts.toml that starts with Marker
	theirs                   // any other hosts.toml, or a link or other file of that name
)

func planWrite(dir string, files map[string]string, check func(string) error) (*writePlan, error) {
	if check == nil {
		check = func(string) error { return nil }
	}
	given, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	p := &writePlan{given: given, root: -1, check: check, files: files}
	real, err := filepath.EvalSymlinks(given)
	if errors.Is(err, fs.ErrNotExist) {
		// apply makes it: judge where.
		if err := check(existingAbove(given)); err != nil {
			return nil, &RefusedError{err}
		}
		p.res.Written = slices.Sorted(maps.Keys(files))
		return p, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", given, err)
	}
	if p.root, err = openDir(unix.AT_FDCWD, real); err != nil {
		return nil, fmt.Errorf("opening %s: %w", given, err)
	}
	p.dir = real
	if err := p.judge(); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// judge decides, for the existing hosts dir, which registries are written,
// skipped and removed, refusing the write where it must.
func (p *writePlan) judge() error {
	if err := p.check(p.dir); err != nil {
		return &RefusedError{err}
	}
	for _, name := range slices.Sorted(maps.Keys(p.files)) {
		st, err := p.state(name, true)
		if err != nil {
			return err
		}
		if st == theirs {
			p.res.Skipped = append(p.res.Skipped, name)
			continue
		}
		p.res.Written = append(p.res.Written, name)
	}
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return fmt.Errorf("reading %s: %w", p.given, err)
	}
	for _, e := range entries {
		if _, wanted := p.files[e.Name()]; wanted {
			continue
		}
		if st, err := p.state(e.Name(), false); err != nil {
			return err
		} else if st == ours {
			p.res.Removed = append(p.res.Removed, e.Name())
		}
	}
	return nil
}

// state reads what registry dir name holds, judging it with check when it
// will be written into. A registry dir to be written that is a symlink or
// not a directory refuses the write; any other such entry is not
// holdfast's (absent).
func (p *writePlan) state(name string, wanted bool) (hostsState, error) {
	path := filepath.Join(p.dir, name)
	var st unix.Stat_t
	err := unix.Fstatat(p.root, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return absent, nil
	case err != nil:
		return absent, fmt.Errorf("reading %s: %w", path, err)
	case st.Mode&unix.S_IFMT == unix.S_IFLNK && wanted:
		return absent, &RefusedError{fmt.Errorf("registry dir %s is a symlink, and holdfast writes no hosts.toml through a link; make it a directory", path)}
	case st.Mode&unix.S_IFMT != unix.S_IFDIR && wanted:
		return absent, &RefusedError{fmt.Errorf("registry dir %s is not a directory", path)}
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return absent, nil
	}
	fd, err := openDir(p.root, name)
	if err != nil {
		return absent, fmt.Errorf("opening %s: %w", path, err)
	}
	defer unix.Close(fd)
	hs, err := readState(fd)
	if err != nil {
		return absent, fmt.Errorf("reading %s: %w", filepath.Join(path, hostsName), err)
	}
	if (wanted && hs != theirs) || (!wanted && hs == ours) {
		if err := p.check(path); err != nil {
			return absent, &RefusedError{err}
		}
	}
	return hs, nil
}

// readState reads whether the hosts.toml in the registry dir open as dir is
// holdfast's, without following a link.
func readState(dir int) (hostsState, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dir, hostsName, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return absent, nil
	case err != nil:
		return absent, err
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return theirs, nil
	}
	fd, err := unix.Openat(dir, hostsName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return absent, err
	}
	f := os.NewFile(uintptr(fd), hostsName)
	defer f.Close()
	head := make([]byte, len(Marker))
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return absent, err
	}
	if bytes.Equal(head[:n], []byte(Marker)) {
		return ours, nil
	}
	return theirs, nil
}

// apply does what the plan decided: makes the hosts dir if it is missing,
// writes, then removes.
func (p *writePlan) apply() error {
	if p.root < 0 {
		if err := os.MkdirAll(p.given, 0o755); err != nil {
			return fmt.Errorf("making %s: %w", p.given, err)
		}
		real, err := filepath.EvalSymlinks(p.given)
		if err != nil {
			return fmt.Errorf("reading %s: %w", p.given, err)
		}
		if p.root, err = openDir(unix.AT_FDCWD, real); err != nil {
			return fmt.Errorf("opening %s: %w", p.given, err)
		}
		p.dir = real
		if err := p.check(real); err != nil {
			return &RefusedError{err}
		}
	}
	for _, name := range p.res.Written {
		if err := p.write(name, p.files[name]); err != nil {
			return err
		}
	}
	for _, name := range p.res.Removed {
		if err := p.remove(name); err != nil {
			return err
		}
	}
	return nil
}

// write replaces the hosts.toml of registry dir name (made if missing) with
// content: a new file beside it, renamed over it, both in the registry dir
// open as a file descriptor (files.WriteFileAt).
func (p *writePlan) write(name, content string) error {
	regDir := filepath.Join(p.dir, name)
	path := filepath.Join(regDir, hostsName)
	if err := unix.Mkdirat(p.root, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("making %s: %w", regDir, err)
	}
	dir, err := openDir(p.root, name)
	if err != nil {
		return fmt.Errorf("opening %s: %w", regDir, err)
	}
	defer unix.Close(dir)
	if err := files.WriteFileAt(dir, hostsName, []byte(content), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// remove unlinks the hosts.toml of registry dir name, then the dir if
// nothing else is in it.
func (p *writePlan) remove(name string) error {
	regDir := filepath.Join(p.dir, name)
	dir, err := openDir(p.root, name)
	if err != nil {
		return fmt.Errorf("opening %s: %w", regDir, err)
	}
	err = unix.Unlinkat(dir, hostsName, 0)
	unix.Close(dir)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("removing %s: %w", filepath.Join(regDir, hostsName), err)
	}
	_ = unix.Unlinkat(p.root, name, unix.AT_REMOVEDIR) // kept when something else is in it
	return nil
}

func (p *writePlan) close() {
	if p.root >= 0 {
		unix.Close(p.root)
		p.root = -1
	}
}

// openDir opens the directory name (in dir at) without following a symlink.
func openDir(at int, name string) (int, error) {
	return unix.Openat(at, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// existingAbove is the nearest directory above path that exists.
func existingAbove(path string) string {
	for p := filepath.Dir(path); ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil || p == filepath.Dir(p) {
			return p
		}
	}
}

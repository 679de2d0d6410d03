// Package datadir owns holdfast's data directory: its default location, its
// layout (what lies where in it) and the lock that lets one process at a
// time own it.
package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/holdfast-project/holdfast/internal/files"
)

// System is the data dir of holdfast run by root.
const System = "/var/lib/holdfast"

// Default is System for root, else $XDG_STATE_HOME/holdfast.
func Default() string {
	if os.Geteuid() == 0 {
		return System
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "holdfast")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "holdfast")
	}
	return filepath.Join(os.TempDir(), "holdfast")
}

// Owner describes the process that holds the lock.
type Owner struct {
	PID     int    `json:"pid"`
	Command string `json:"command"`
	Address string `json:"address"` // the containerd it works against
}

// ErrLocked is returned when another process owns the data dir.
var ErrLocked = errors.New("data dir is in use")

// LockedError says who owns the data dir.
type LockedError struct {
	Dir   string
	Owner Owner
}

func (e *LockedError) Error() string {
	if e.Owner.PID == 0 {
		return fmt.Sprintf("data dir %s is in use by another holdfast process", e.Dir)
	}
	return fmt.Sprintf("data dir %s is in use by holdfast %s (pid %d)", e.Dir, e.Owner.Command, e.Owner.PID)
}

func (e *LockedError) Unwrap() error { return ErrLocked }

// Lock is an exclusive lock on a data dir, held until Release or exit. It is
// two flocks: on the directory itself, which nobody can take while the owner
// lives and the directory does, even if its lock file is deleted; and on the
// lock file, which Held reads and which earlier holdfast versions lock.
type Lock struct {
	mu    sync.Mutex
	d, f  *os.File
	dir   string
	owner Owner
}

// Acquire takes the data dir's lock without waiting, creating the dir if needed.
func Acquire(dir, command string) (*Lock, error) {
	d, f, err := lockFile(dir)
	if err != nil {
		return nil, err
	}
	l := &Lock{d: d, f: f, dir: dir}
	if err := l.SetOwner(Owner{PID: os.Getpid(), Command: command}); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// lockFile creates dir if needed and returns it and its lock file, both locked.
func lockFile(dir string) (d, f *os.File, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("creating data dir: %w", err)
	}
	if d, err = os.Open(dir); err != nil {
		return nil, nil, fmt.Errorf("opening data dir: %w", err)
	}
	if err := lockExclusive(d, dir); err != nil {
		d.Close()
		return nil, nil, err
	}
	if f, err = lockFileIn(dir); err != nil {
		d.Close()
		return nil, nil, err
	}
	return d, f, nil
}

// lockFileIn opens dir's lock file and locks it.
func lockFileIn(dir string) (*os.File, error) {
	f, err := os.OpenFile(At(dir).lockFile(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock: %w", err)
	}
	if err := lockExclusive(f, dir); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// lockExclusive flocks f without waiting; held by another, it says by whom.
func lockExclusive(f *os.File, dir string) error {
	err := files.TryLock(f)
	if errors.Is(err, files.ErrHeld) {
		owner, _ := ReadOwner(dir)
		return &LockedError{Dir: dir, Owner: owner}
	}
	if err != nil {
		return fmt.Errorf("locking %s: %w", dir, err)
	}
	return nil
}

// SetOwner records who holds the lock, for other processes to attach to.
func (l *Lock) SetOwner(o Owner) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.owner = o
	return l.writeOwner()
}

func (l *Lock) writeOwner() error {
	data, err := json.Marshal(l.owner)
	if err != nil {
		return err
	}
	// Who holds the lock only matters while it does.
	return files.ReplaceFile(At(l.dir).ownerFile(), data, 0o600)
}

// Keep takes the lock again when the data dir was deleted or replaced under
// its owner (rm -rf): a lock on a deleted file keeps nobody out. It re-creates
// the dir, locks its new lock file and records the owner again, and says
// whether it had to. While another process holds the new lock, it returns
// that process's LockedError; a later Keep tries again.
func (l *Lock) Keep() (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return false, nil
	}
	if !same(l.d, l.dir) {
		// The dir itself is gone or replaced: nothing held it for us.
		d, f, err := lockFile(l.dir)
		if err != nil {
			return false, err
		}
		_ = l.d.Close() // the old dir and file are gone: nobody else can lock them
		_ = l.f.Close()
		l.d, l.f = d, f
		return true, l.writeOwner()
	}
	if !same(l.f, At(l.dir).lockFile()) {
		// Only the lock file went: the dir's lock kept everyone out meanwhile.
		f, err := lockFileIn(l.dir)
		if err != nil {
			return false, err
		}
		_ = l.f.Close()
		l.f = f
		return true, l.writeOwner()
	}
	if _, err := os.Stat(At(l.dir).ownerFile()); errors.Is(err, fs.ErrNotExist) {
		return false, l.writeOwner()
	}
	return false, nil
}

// same says whether path is still the file f has open.
func same(f *os.File, path string) bool {
	var held, now syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &held); err != nil {
		return false
	}
	return syscall.Stat(path, &now) == nil && now.Dev == held.Dev && now.Ino == held.Ino
}

// Release gives the lock up.
func (l *Lock) Release() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return
	}
	_ = os.Remove(At(l.dir).ownerFile())
	files.Unlock(l.f)
	files.Unlock(l.d)
	l.d, l.f = nil, nil
}

// Held reports whether another process holds the lock, and who it is: the
// dir's lock, or the lock file's (an earlier holdfast takes only that).
func Held(dir string) (Owner, bool) {
	for _, path := range []string{dir, At(dir).lockFile()} {
		if files.Locked(path) {
			o, _ := ReadOwner(dir)
			return o, true
		}
	}
	return Owner{}, false
}

// ReadOwner reads who holds the lock.
func ReadOwner(dir string) (Owner, error) {
	var o Owner
	data, err := os.ReadFile(At(dir).ownerFile())
	if err != nil {
		return o, err
	}
	return o, json.Unmarshal(data, &o)
}

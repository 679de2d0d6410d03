// Package datadir owns holdfast's data directory: its default location and the
// lock that lets one process at a time own it.
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
)

// Default is /var/lib/holdfast for root, else $XDG_STATE_HOME/holdfast.
func Default() string {
	if os.Geteuid() == 0 {
		return "/var/lib/holdfast"
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

// Lock is an exclusive lock on a data dir, held until Release or exit.
type Lock struct {
	mu    sync.Mutex
	f     *os.File
	dir   string
	owner Owner
}

// Acquire takes the data dir's lock without waiting, creating the dir if needed.
func Acquire(dir, command string) (*Lock, error) {
	f, err := lockFile(dir)
	if err != nil {
		return nil, err
	}
	l := &Lock{f: f, dir: dir}
	if err := l.SetOwner(Owner{PID: os.Getpid(), Command: command}); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// lockFile creates dir if needed and returns its lock file, locked.
func lockFile(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating data dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			owner, _ := ReadOwner(dir)
			return nil, &LockedError{Dir: dir, Owner: owner}
		}
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	return f, nil
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
	return ReplaceFile(filepath.Join(l.dir, "owner.json"), data, 0o600)
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
	var held, now syscall.Stat_t
	if err := syscall.Fstat(int(l.f.Fd()), &held); err != nil {
		return false, fmt.Errorf("checking the lock of %s: %w", l.dir, err)
	}
	if err := syscall.Stat(filepath.Join(l.dir, "lock"), &now); err == nil && now.Dev == held.Dev && now.Ino == held.Ino {
		if _, err := os.Stat(filepath.Join(l.dir, "owner.json")); errors.Is(err, fs.ErrNotExist) {
			return false, l.writeOwner()
		}
		return false, nil
	}
	f, err := lockFile(l.dir)
	if err != nil {
		return false, err
	}
	_ = l.f.Close() // the old file is gone: nobody else can lock it
	l.f = f
	if err := l.writeOwner(); err != nil {
		return true, err
	}
	return true, nil
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
	_ = os.Remove(filepath.Join(l.dir, "owner.json"))
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
	l.f = nil
}

// Held reports whether another process holds the lock, and who it is.
func Held(dir string) (Owner, bool) {
	f, err := os.Open(filepath.Join(dir, "lock"))
	if err != nil {
		return Owner{}, false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return Owner{}, false
	}
	o, _ := ReadOwner(dir)
	return o, true
}

// ReadOwner reads who holds the lock.
func ReadOwner(dir string) (Owner, error) {
	var o Owner
	data, err := os.ReadFile(filepath.Join(dir, "owner.json"))
	if err != nil {
		return o, err
	}
	return o, json.Unmarshal(data, &o)
}

// WriteFileAtomic writes data to a temp file beside path, syncs it and renames it into place.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	return writeAtomic(path, data, perm, true)
}

// ReplaceFile is WriteFileAtomic without the sync, for files that need not
// survive a crash: readers see the old content or the new, never a part.
func ReplaceFile(path string, data []byte, perm os.FileMode) error {
	return writeAtomic(path, data, perm, false)
}

func writeAtomic(path string, data []byte, perm os.FileMode, durable bool) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if durable {
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

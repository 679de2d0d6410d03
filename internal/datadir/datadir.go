// Package datadir owns holdfast's data directory: its default location and the
// lock that lets one process at a time own it.
package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	f   *os.File
	dir string
}

// Acquire takes the data dir's lock without waiting, creating the dir if needed.
func Acquire(dir, command string) (*Lock, error) {
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
	l := &Lock{f: f, dir: dir}
	if err := l.SetOwner(Owner{PID: os.Getpid(), Command: command}); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// SetOwner records who holds the lock, for other processes to attach to.
func (l *Lock) SetOwner(o Owner) error {
	data, err := json.Marshal(o)
	if err != nil {
		return err
	}
	// Who holds the lock only matters while it does.
	return ReplaceFile(filepath.Join(l.dir, "owner.json"), data, 0o600)
}

// Release gives the lock up.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
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

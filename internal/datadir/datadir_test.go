package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestLock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, held := Held(dir); held {
		t.Fatal("fresh dir reported held")
	}
	l, err := Acquire(dir, "sync")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetOwner(Owner{PID: os.Getpid(), Command: "run", Address: "/x.sock"}); err != nil {
		t.Fatal(err)
	}
	// flock is per open file description: a second Acquire in this process conflicts too.
	_, err = Acquire(dir, "sync")
	var le *LockedError
	if !errors.As(err, &le) || !errors.Is(err, ErrLocked) {
		t.Fatalf("second Acquire: %v, want LockedError", err)
	}
	if le.Owner.Command != "run" || le.Owner.Address != "/x.sock" || le.Owner.PID != os.Getpid() {
		t.Fatalf("owner = %+v", le.Owner)
	}
	if o, held := Held(dir); !held || o.Address != "/x.sock" {
		t.Fatalf("Held = %+v, %v", o, held)
	}
	l.Release()
	if _, held := Held(dir); held {
		t.Fatal("released dir reported held")
	}
	l2, err := Acquire(dir, "sync")
	if err != nil {
		t.Fatalf("Acquire after release: %v", err)
	}
	l2.Release()
}

// TestLockKeptWhenDataDirDeleted: a data dir deleted under its owner is
// re-created with its lock and owner; if another process took it first, the
// owner is told so and takes it back once that one is gone.
func TestLockKeptWhenDataDirDeleted(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	l, err := Acquire(dir, "run")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	owner := Owner{PID: os.Getpid(), Command: "run", Address: "/x.sock"}
	if err := l.SetOwner(owner); err != nil {
		t.Fatal(err)
	}
	if restored, err := l.Keep(); restored || err != nil {
		t.Fatalf("Keep with nothing lost: %v, %v", restored, err)
	}

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if restored, err := l.Keep(); !restored || err != nil {
		t.Fatalf("Keep after the data dir was deleted: %v, %v", restored, err)
	}
	if o, held := Held(dir); !held || o != owner {
		t.Errorf("after Keep: Held = %+v, %v; want %+v", o, held, owner)
	}
	if _, err := Acquire(dir, "sync"); !errors.Is(err, ErrLocked) {
		t.Errorf("Acquire beside the restored lock: %v, want ErrLocked", err)
	}

	// Deleted again, and taken by another process first.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	other, err := Acquire(dir, "sync")
	if err != nil {
		t.Fatal(err)
	}
	if restored, err := l.Keep(); restored || !errors.Is(err, ErrLocked) {
		t.Errorf("Keep while another process holds the new lock: %v, %v; want ErrLocked", restored, err)
	}
	other.Release()
	if restored, err := l.Keep(); !restored || err != nil {
		t.Fatalf("Keep once the other process is gone: %v, %v", restored, err)
	}
	if o, held := Held(dir); !held || o != owner {
		t.Errorf("after Keep: Held = %+v, %v; want %+v", o, held, owner)
	}
}

// TestLockHoldsWhenLockFileDeleted: with only the lock file deleted under its
// owner, no other process takes the data dir, not even before Keep runs; Keep
// makes the lock file again.
func TestLockHoldsWhenLockFileDeleted(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	l, err := Acquire(dir, "run")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if err := os.Remove(filepath.Join(dir, "lock")); err != nil {
		t.Fatal(err)
	}
	if other, err := Acquire(dir, "sync"); !errors.Is(err, ErrLocked) {
		other.Release()
		t.Fatalf("Acquire after the owner's lock file was deleted: %v, want ErrLocked", err)
	}
	if o, held := Held(dir); !held || o.Command != "run" {
		t.Errorf("Held after the lock file was deleted: %+v, %v; want run's", o, held)
	}
	if restored, err := l.Keep(); !restored || err != nil {
		t.Fatalf("Keep after the lock file was deleted: %v, %v", restored, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "lock")); err != nil {
		t.Errorf("Keep did not make the lock file again: %v", err)
	}
	if _, err := Acquire(dir, "sync"); !errors.Is(err, ErrLocked) {
		t.Errorf("Acquire beside the kept lock: %v, want ErrLocked", err)
	}
	l.Release()
	l2, err := Acquire(dir, "sync")
	if err != nil {
		t.Fatalf("Acquire after release: %v", err)
	}
	l2.Release()
}

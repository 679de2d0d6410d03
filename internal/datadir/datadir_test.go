package datadir

import (
	"errors"
	"os"
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

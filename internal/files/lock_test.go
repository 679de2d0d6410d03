package files

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLock: a second Lock on a held file waits until the first is given
// up, or until its context ends; TryLock never waits, and Locked sees the
// lock from another open file.
func TestLock(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lock")
	if Locked(path) {
		t.Fatal("a missing file reported locked")
	}
	unlock, err := Lock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if !Locked(path) {
		t.Error("a held lock not reported")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := TryLock(f); !errors.Is(err, ErrHeld) {
		t.Errorf("TryLock of a held file: %v; want ErrHeld", err)
	}
	f.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Lock(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock of a held file until the deadline: %v; want DeadlineExceeded", err)
	}

	got := make(chan error, 1)
	go func() {
		u, err := Lock(context.Background(), path)
		if err == nil {
			u()
		}
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("Lock once the holder let go: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Lock still waiting after the holder let go")
	}
	if Locked(path) {
		t.Error("a released lock reported held")
	}
}

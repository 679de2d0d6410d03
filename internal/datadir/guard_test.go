package datadir

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestGuardRestoresDeletedDataDir: Guard takes the lock again within a
// second or two of the data dir being deleted, and says so.
func TestGuardRestoresDeletedDataDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	l, err := Acquire(dir, "run")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	restored := make(chan struct{}, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Guard(ctx, func(err error) { t.Errorf("lost: %v", err) }, func() { restored <- struct{}{} })
	}()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	select {
	case <-restored:
	case <-time.After(30 * time.Second):
		t.Fatal("Guard did not take the lock again")
	}
	if _, err := Acquire(dir, "sync"); !errors.Is(err, ErrLocked) {
		t.Errorf("Acquire after Guard restored the dir: %v, want ErrLocked", err)
	}
	cancel()
	<-done
	if len(restored) != 0 {
		t.Errorf("Guard restored %d more times with nothing deleted", len(restored))
	}
}

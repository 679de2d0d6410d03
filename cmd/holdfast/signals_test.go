package main

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestWatchSignals: the first signal cancels the command; a second ends it
// at once (no wait for the bound); with no second, the bound ends it; a
// command that returned first is never ended. The status is 128+n.
func TestWatchSignals(t *testing.T) {
	run := func(bound time.Duration, send []os.Signal, quitFirst bool) (cancelled bool, code int) {
		sigs := make(chan os.Signal, 2)
		quit := make(chan struct{})
		codes := make(chan int, 1)
		done := make(chan struct{})
		cancelledCh := make(chan struct{})
		go func() {
			defer close(done)
			watchSignals(sigs, quit, func() { close(cancelledCh) }, bound, func(c int) { codes <- c })
		}()
		if quitFirst {
			close(quit)
		}
		for _, s := range send {
			sigs <- s
		}
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("watchSignals has not returned after a minute")
		}
		select {
		case <-cancelledCh:
			cancelled = true
		default:
		}
		select {
		case code = <-codes:
		default:
			code = -1
		}
		return cancelled, code
	}
	if c, code := run(time.Hour, []os.Signal{syscall.SIGTERM, syscall.SIGINT}, false); !c || code != 130 {
		t.Errorf("two signals: cancelled %v, status %d; want cancelled and 130 at once", c, code)
	}
	if c, code := run(10*time.Millisecond, []os.Signal{syscall.SIGTERM}, false); !c || code != 143 {
		t.Errorf("one SIGTERM past the bound: cancelled %v, status %d; want cancelled and 143", c, code)
	}
	if c, code := run(time.Hour, nil, true); c || code != -1 {
		t.Errorf("a command that returned: cancelled %v, status %d; want neither", c, code)
	}
}

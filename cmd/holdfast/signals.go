package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// endOnSignals makes SIGTERM and SIGINT end the command (see
// docs/operations.md, Signals). The first cancels the command's context;
// a command that has not returned bound later is ended with the status a
// shell gives for the signal (128+n: 143 for SIGTERM, 130 for SIGINT), so
// that one blocked where no context reaches (a read of a pipe that never
// ends) ends all the same. A second signal ends it at once. The returned
// func stops the watch once the command has returned.
func endOnSignals(cancel context.CancelFunc, bound time.Duration) (stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	quit := make(chan struct{})
	go watchSignals(sigs, quit, cancel, bound, os.Exit)
	return func() {
		signal.Stop(sigs)
		close(quit)
	}
}

// watchSignals is endOnSignals' watch: exit is os.Exit outside tests.
func watchSignals(sigs <-chan os.Signal, quit <-chan struct{}, cancel context.CancelFunc, bound time.Duration, exit func(int)) {
	var first os.Signal
	select {
	case first = <-sigs:
	case <-quit:
		return
	}
	cancel()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case s := <-sigs:
		fmt.Fprintf(os.Stderr, "holdfast: %v again: ending now\n", s)
		exit(signalStatus(s))
	case <-t.C:
		fmt.Fprintf(os.Stderr, "holdfast: %v: the command did not end within %s of it; ending now\n", first, bound)
		exit(signalStatus(first))
	case <-quit:
	}
}

// signalStatus is the exit status a shell reports for a process the signal
// ended: 128 and the signal's number.
func signalStatus(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 1
}

package main

import (
	"runtime"
	"testing"
)

func TestSpareProc(t *testing.T) {
	n := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(n)

	t.Setenv("GOMAXPROCS", "")
	spareProc()
	if got := runtime.GOMAXPROCS(0); got != n+1 {
		t.Errorf("GOMAXPROCS = %d, want %d: one more than the default", got, n+1)
	}
	runtime.GOMAXPROCS(n)

	t.Setenv("GOMAXPROCS", "1")
	spareProc()
	if got := runtime.GOMAXPROCS(0); got != n {
		t.Errorf("GOMAXPROCS set in the environment: changed to %d", got)
	}
}

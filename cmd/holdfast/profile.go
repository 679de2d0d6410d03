package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// startProfile writes a CPU profile to $HOLDFAST_CPU_PROFILE and an execution
// trace to $HOLDFAST_TRACE, when set, for the life of the command (go tool
// pprof, go tool trace). The returned func stops and flushes them.
func startProfile() (stop func()) {
	var stops []func()
	if path := os.Getenv("HOLDFAST_CPU_PROFILE"); path != "" {
		if f := create(path); f != nil {
			if err := pprof.StartCPUProfile(f); err != nil {
				fmt.Fprintf(os.Stderr, "holdfast: cpu profile %s: %v\n", path, err)
			}
			stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
		}
	}
	if path := os.Getenv("HOLDFAST_TRACE"); path != "" {
		if f := create(path); f != nil {
			if err := trace.Start(f); err != nil {
				fmt.Fprintf(os.Stderr, "holdfast: trace %s: %v\n", path, err)
			}
			stops = append(stops, func() { trace.Stop(); f.Close() })
		}
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}

func create(path string) *os.File {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "holdfast: %v\n", err)
		return nil
	}
	return f
}

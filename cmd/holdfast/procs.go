package main

import (
	"os"
	"runtime"
)

// spareProc runs Go code on one more thread than the default (the CPUs
// holdfast may use), unless GOMAXPROCS is set in the environment.
//
// An import keeps a goroutine in write(2) most of the time: the direct write
// path writes each blob's chunks with O_DIRECT, which returns only once the
// disk has them, while the next chunk is decoded and hashed. Go counts a
// goroutine in a system call against GOMAXPROCS until the runtime's monitor
// takes its P back (20 µs to 10 ms later), and when the write returns the
// goroutine waits for a P until decoding or hashing yields one. With as many
// Ps as CPUs, every write so takes CPU time from the decoder and the hash and
// comes back late. On 2 CPUs (medians of alternating runs) the walk of the
// bench's 1 GiB .tar.zst took 1.12–1.19 s with three Ps against 1.39–1.45 s
// with two; a model of it (two goroutines hashing, one sleeping 0.5 ms in a
// system call per chunk) 0.69–0.73 s against 0.80–0.96 s. The spare P costs
// nothing while the writer waits in the kernel.
//
// Setting GOMAXPROCS stops the runtime from following later changes of the
// CPU limit of holdfast's cgroup (it reads the limit at start).
func spareProc() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1)
}

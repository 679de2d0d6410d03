// Package embedded runs containerd v2 from the holdfast binary itself.
//
// The holdfast binary is multicall: `holdfast containerd --config F` runs
// containerd's own command line ([Main]), and [Start] self-executes the binary
// that way as a child process with a config file generated for one data dir
// ([WriteConfig], [Paths]). containerd runs in a child process, never in a
// goroutine, because it installs signal handlers and because its packages
// have process-wide init() side effects (grpclog is silenced, urfave/cli
// globals change): the parent keeps its own logging and signals.
//
// This package (and cmd/holdfast) is the only place that imports containerd's
// server packages; everything else talks to containerd over its socket.
//
// Version: containerd reports the version set at link time. The Makefile
// builds holdfast with
//
//	-ldflags "-X github.com/containerd/containerd/v2/version.Version=2.4.2"
//
// Without it containerd (its log, `--version` and the version service)
// reports "2.4.2+unknown". Keep the value in step with go.mod.
//
// The package is Linux-only: it mounts, uses Pdeathsig and reads
// /proc/self/mountinfo.
package embedded

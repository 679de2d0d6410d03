// Package embedded runs containerd v2 for holdfast when no --address is given.
//
// The embedded containerd is its own binary, holdfast-containerd
// (cmd/holdfast-containerd, package daemon), installed next to holdfast;
// `holdfast containerd ...` executes it. [Start] runs it as a child process
// with a config file generated for one data dir ([WriteConfig], [Paths]).
// containerd runs in a child process, never in a goroutine, because it
// installs signal handlers and because its packages have process-wide init()
// side effects (grpclog is silenced, urfave/cli globals change); and in its
// own binary because those init()s cost every process that links them about
// 30 MiB and several milliseconds before main, which a warm `holdfast sync`
// must not pay.
//
// Only package daemon imports containerd's server packages; everything else
// talks to containerd over its socket.
//
// Version: containerd reports the version set at link time. The Makefile
// builds holdfast-containerd with
//
//	-ldflags "-X github.com/containerd/containerd/v2/version.Version=2.4.2"
//
// Without it containerd (its log, `--version` and the version service)
// reports "2.4.2+unknown". Keep the value in step with go.mod.
//
// The package is Linux-only: it mounts, uses Pdeathsig and reads
// /proc/self/mountinfo.
package embedded

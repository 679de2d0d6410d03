// Package daemon is containerd's own server, as the holdfast-containerd
// binary runs it. It is the only package that imports containerd's server
// packages, and only cmd/holdfast-containerd (and the embedded package's
// tests) link it: their init()s cost every process that links them tens of
// milliseconds and tens of MiB before main, which holdfast's own commands
// must not pay.
package daemon

import (
	"context"
	"fmt"
	"os"

	"github.com/containerd/containerd/v2/cmd/containerd/command"

	// The plugins of a stock containerd build: snapshotters (overlayfs,
	// native, ...), content, metadata, leases, transfer, the gRPC and ttrpc
	// servers, health, and (builtins/cri.go, without the no_cri tag) the CRI
	// images and runtime plugins.
	_ "github.com/containerd/containerd/v2/cmd/containerd/builtins"
)

// Main runs containerd's own command line and returns its exit code. args is
// the command line without the binary's name, starting with "containerd",
// e.g. ["containerd", "--config", "/data/containerd/config.toml"].
//
// Main is meant to be the whole life of its process: containerd installs
// signal handlers and stops on SIGTERM or SIGINT.
func Main(args []string) int {
	if len(args) == 0 || args[0] != "containerd" {
		args = append([]string{"containerd"}, args...)
	}
	if err := command.App().Run(context.Background(), args); err != nil {
		fmt.Fprintln(os.Stderr, "containerd:", err)
		return 1
	}
	return 0
}

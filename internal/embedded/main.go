package embedded

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
// the command line without the holdfast binary's name, starting with
// "containerd", e.g. ["containerd", "--config", "/data/containerd/config.toml"]:
// cmd/holdfast calls Main(os.Args[1:]) for `holdfast containerd ...` before
// any other initialisation, and exits with the result.
//
// Main is meant to be the whole life of its process: containerd installs
// signal handlers and stops on SIGTERM or SIGINT.
func Main(args []string) int {
	if len(args) == 0 {
		args = []string{"containerd"}
	}
	if err := command.App().Run(context.Background(), args); err != nil {
		fmt.Fprintln(os.Stderr, "containerd:", err)
		return 1
	}
	return 0
}

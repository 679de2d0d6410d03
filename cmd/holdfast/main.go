// Command holdfast keeps air-gapped images in containerd.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/holdfast-project/holdfast/internal/cli"
	"github.com/holdfast-project/holdfast/internal/embedded"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	// The embedded containerd runs in a child process started as
	// "holdfast containerd ...": hand over before anything else is set up.
	if len(os.Args) > 1 && os.Args[1] == "containerd" {
		os.Exit(embedded.Main(os.Args[1:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := cli.New(version).ExecuteContext(ctx)
	stop()
	var ee *cli.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.Err == nil) {
		fmt.Fprintf(os.Stderr, "holdfast: %v\n", err)
	}
	os.Exit(cli.ExitCode(err))
}

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
	// `holdfast containerd ...` is the embedded containerd: become it.
	if len(os.Args) > 1 && os.Args[1] == "containerd" {
		bin, err := embedded.Binary()
		if err == nil {
			err = syscall.Exec(bin, append([]string{bin}, os.Args[1:]...), os.Environ())
		}
		fmt.Fprintf(os.Stderr, "holdfast: %v\n", err)
		os.Exit(1)
	}
	spareProc()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	stopProfile := startProfile()
	err := cli.New(version).ExecuteContext(ctx)
	stopProfile()
	stop()
	var ee *cli.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.Err == nil) {
		fmt.Fprintf(os.Stderr, "holdfast: %v\n", err)
	}
	os.Exit(cli.ExitCode(err))
}

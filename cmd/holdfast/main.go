// Command holdfast keeps air-gapped images in containerd.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/holdfast-project/holdfast/internal/cli"
	"github.com/holdfast-project/holdfast/internal/embedded"
)

// version and commit are set at build time with -ldflags
// "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  string
)

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
	root := cli.New(version, commit)
	ctx, cancel := context.WithCancel(context.Background())
	stopSignals := endOnSignals(cancel, cli.StopBound(root, os.Args[1:]))
	stopProfile := startProfile()
	err := root.ExecuteContext(ctx)
	stopProfile()
	stopSignals()
	cancel()
	var ee *cli.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.Err == nil) {
		fmt.Fprintf(os.Stderr, "holdfast: %v\n", err)
	}
	os.Exit(cli.ExitCode(err))
}

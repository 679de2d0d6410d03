// Command holdfast-containerd is the embedded containerd: containerd's own
// server with its stock plugins, which holdfast starts (as
// `holdfast-containerd containerd --config F`) when no --address is given.
// Install it next to the holdfast binary.
package main

import (
	"os"

	"github.com/holdfast-project/holdfast/internal/embedded/daemon"
)

func main() {
	os.Exit(daemon.Main(os.Args[1:]))
}

package cli

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/agent"
)

// stopBound is how long a command has to return once the first SIGTERM or
// SIGINT has cancelled its context, before holdfast ends anyway (main: a
// command blocked where no context reaches, such as a read of a pipe that
// never ends). It leaves a command that starts its own embedded containerd
// the time to stop it as it does under load; past it the containerd gets
// SIGKILL from the kernel as holdfast exits (embedded.Start: Pdeathsig).
const stopBound = 800 * time.Millisecond

// containerdStopTimeout bounds the embedded containerd's clean stop when a
// command that started it ends (session.close).
const containerdStopTimeout = 30 * time.Second

// runStopBound is stopBound for holdfast run: its parts' end
// (agent.ShutdownTimeout), then the embedded containerd's clean stop, and a
// little to spare. It is within systemd's TimeoutStopSec and the chart's
// terminationGracePeriodSeconds (60 s each).
const runStopBound = agent.ShutdownTimeout + containerdStopTimeout + 5*time.Second

// cleanupTimeout bounds the clean-up of an import a cancelled command gives
// up (its lease and ingests; importer's abandonTimeout, the stream's
// clean-up in pass/keepstream.go).
const cleanupTimeout = 30 * time.Second

// writerStopBound is stopBound for the other commands that write into
// containerd (writers, release): the clean-up of an import they gave up,
// then the embedded containerd's clean stop, and a little to spare, so that
// a cancelled sync leaves no lease, ingest or record behind.
const writerStopBound = cleanupTimeout + containerdStopTimeout + 5*time.Second

// StopBound is how long the command args name (os.Args[1:]) has to return
// after the first SIGTERM or SIGINT: runStopBound for run, writerStopBound
// for sync, import and release, stopBound for every other.
func StopBound(root *cobra.Command, args []string) time.Duration {
	cmd, _, err := root.Find(args)
	switch {
	case err != nil:
		return stopBound
	case cmd.Name() == "run":
		return runStopBound
	case writer(cmd) || cmd.Name() == "release":
		return writerStopBound
	}
	return stopBound
}

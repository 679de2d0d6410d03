package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// newContainerd documents the embedded containerd in help; main runs it before
// cobra is set up, so that containerd's own flags and process-wide set-up stay
// out of holdfast's.
func newContainerd() *cobra.Command {
	return &cobra.Command{
		Use:   "containerd [containerd flags]",
		Short: "Run the embedded containerd (holdfast starts it itself; see --address)",
		Long: `containerd runs holdfast-containerd, the embedded containerd (found beside
holdfast, else in PATH), with the arguments that follow: containerd's own flags,
not holdfast's. holdfast starts it itself, in --data-dir, when --address is
empty. containerd must be holdfast's first argument.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return &usageError{errors.New("holdfast containerd must be the first argument")}
		},
	}
}

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
		Use:                "containerd [containerd flags]",
		Short:              "Run the embedded containerd (holdfast starts it itself; see --address)",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return &usageError{errors.New("holdfast containerd must be the first argument")}
		},
	}
}

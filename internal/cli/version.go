package cli

import (
	"fmt"
	goruntime "runtime"

	"github.com/spf13/cobra"
)

func newVersion(version string) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print holdfast's version",
		Args:  cobra.NoArgs,
		// No containerd needed: skip the common set-up.
		PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "holdfast %s (%s, %s/%s)\n", version, goruntime.Version(), goruntime.GOOS, goruntime.GOARCH)
			return nil
		},
	}
}

package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/flagenv"
	"github.com/holdfast-project/holdfast/internal/pass"
)

func newSync(o *options) *cobra.Command {
	var parallel int
	var progress progressFlag
	cmd := &cobra.Command{
		Use:   "sync",
		Short: "Run one pass: import and pin every source in the images dirs, then exit",
		Long: `sync imports every archive and OCI layout directory in the images dirs into
containerd, pins their images and leases their content, then exits. With
--spool, it also imports each archive or OCI layout dir in the spool dirs as a
kept source and deletes it (docs/kept-sources.md).

Exit status: 0 when every source applied, 1 when any failed (the others still
applied, and each failure is printed as "error: import <file>: <cause>"), 2 on
bad usage. It ends with a one-line summary:
  sync: 4 imported, 0 unchanged, 0 healed, 0 unpinned, 0 failed; 9 images pinned; 3.1 MiB read in 412ms`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			cfg, hosts, err := o.agentConfig(parallel)
			if err != nil {
				return err
			}
			s, err := o.openPasses(ctx, "sync", &cfg, hosts)
			if err != nil {
				return err
			}
			defer s.close()
			d := o.newProgress(cmd, progress, true)
			cfg.Progress = d.Hook()
			d.Start()
			sum := pass.Sync(ctx, s.rt, cfg.Config)
			d.Stop()
			for _, c := range sum.Conflicts {
				fmt.Fprintf(cmd.OutOrStdout(), "conflict: %s\n", c)
			}
			for _, p := range sum.Spooled {
				fmt.Fprintf(cmd.OutOrStdout(), "spool: %s imported, kept and removed\n", p)
			}
			for _, f := range sum.Failures {
				fmt.Fprintf(cmd.ErrOrStderr(), "error: %v\n", f)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "sync: %s\n", sum)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if sum.Failed > 0 {
				return &ExitError{Code: 1}
			}
			return nil
		},
		Annotations: writes,
	}
	cmd.Flags().IntVar(&parallel, "parallel", 0, "archives imported at once; 0: from the CPU count")
	flagenv.Allow(cmd.Flags(), "parallel")
	addProgressFlag(cmd, &progress)
	return cmd
}

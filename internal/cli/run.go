package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/agent"
)

func newRun(o *options) *cobra.Command {
	var parallel int
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent: one pass, then stay up (holding the data dir) until SIGTERM or SIGINT",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			dirs, err := o.imageDirs()
			if err != nil {
				return err
			}
			s, err := o.openOwner(ctx, "run")
			if err != nil {
				return err
			}
			defer s.close()
			if _, err := agent.CheckServer(ctx, s.rt, o.log); err != nil {
				return err
			}
			sum := agent.Sync(ctx, s.rt, agent.Config{ImageDirs: dirs, Parallel: parallel, Log: o.log})
			for _, f := range sum.Failures {
				o.log.Error("source failed", "error", f)
			}
			o.log.Info(fmt.Sprintf("first pass: %s", sum), "address", s.address)
			<-ctx.Done()
			o.log.Info("stopping")
			return nil
		},
	}
	cmd.Flags().IntVar(&parallel, "parallel", 0, "archives imported at once (0: from the CPU count)")
	return cmd
}

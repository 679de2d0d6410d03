package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/pass"
)

func newPlan(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show what a sync would do now, changing nothing",
		Long: `plan runs the pass a sync would run, with every write left undone, and lists
what it would do: import (a source that is new, changed, or whose leased
content is gone), remove (a spool file, once imported), pull, pin, heal, unpin
and release, each with its reason and source. It is the same pass as sync's
(spool dirs, markers, lists, conflicts included), so what plan lists is what a
sync started at once does. Sources to import are read, so that the names they
would pin are known; an import that would fail says why. A pull list reference
not in the store is listed as a pull: its pin follows the pull.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return &usageError{fmt.Errorf("-o %q: want table or json", output)}
			}
			ctx := cmd.Context()
			cfg, err := o.passConfig(0)
			if err != nil {
				return err
			}
			s, err := o.openReader(ctx, "plan")
			if err != nil {
				return err
			}
			defer s.close()
			cfg.Policy = o.policyFile // the one in force in the namespace, when none was given
			actions, _ := pass.DryRun(ctx, s.rt, cfg)
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if actions == nil {
					actions = []pass.Action{}
				}
				return enc.Encode(map[string]any{"actions": actions})
			}
			return writePlan(cmd.OutOrStdout(), actions)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

func writePlan(w io.Writer, actions []pass.Action) error {
	if len(actions) == 0 {
		_, err := fmt.Fprintln(w, "nothing to do")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACTION\tNAME / LEASE\tSOURCE\tREASON")
	for _, a := range actions {
		subject := a.Name
		if subject == "" {
			subject = a.Lease
		}
		if subject == "" {
			subject = "-"
		}
		src := a.Source
		if src == "" {
			src = "-"
		}
		reason := a.Reason
		if len(a.Skipped) > 0 {
			reason += " (" + a.Format + "; skipping " + skippedWord(a.Skipped) + ")"
		}
		if a.Error != "" {
			reason += ": would fail: " + a.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.Action, subject, src, reason)
	}
	return tw.Flush()
}

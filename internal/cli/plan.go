package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/agent"
	"github.com/holdfast-project/holdfast/internal/reconcile"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/source"
)

// PlanAction is one line of `plan -o json`.
type PlanAction struct {
	Action string `json:"action"` // import, pin, heal, unpin, release
	Name   string `json:"name,omitempty"`
	Target string `json:"target,omitempty"`
	Lease  string `json:"lease,omitempty"`
	Source string `json:"source,omitempty"`
	Reason string `json:"reason"`
}

func newPlan(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show what a sync would do now, changing nothing",
		Long: `plan reads the images dirs and containerd and lists what a sync would do:
import (a source that is new, changed, or whose leased content is gone), pin,
heal, unpin and release, each with its reason and source. It writes nothing.

The names a source to be imported holds are only known once it is read, so
their pins are not listed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return &usageError{fmt.Errorf("-o %q: want table or json", output)}
			}
			ctx := cmd.Context()
			dirs, err := o.imageDirs()
			if err != nil {
				return err
			}
			s, err := o.openReader(ctx, "plan")
			if err != nil {
				return err
			}
			defer s.close()
			scan := source.ScanWith(dirs, source.ScanOptions{InsecurePerms: o.insecurePerms})
			leases, err := s.rt.Sources(ctx)
			if err != nil {
				return err
			}
			var actions []PlanAction
			for _, src := range scan.Sources {
				if src.Kind != source.Archive && src.Kind != source.OCIDir {
					continue
				}
				if reason := importReason(src, leases); reason != "" {
					actions = append(actions, PlanAction{Action: "import", Source: src.Path, Reason: reason})
				}
			}
			// What a pin or pull list wants is only worked out by a sync: keep its lease as it is.
			for _, src := range scan.Sources {
				if src.Kind == source.PinList || src.Kind == source.PullList {
					scan.Unreadable = append(scan.Unreadable, src.Path)
				}
			}
			plan, err := agent.Plan(ctx, s.rt, scan, nil, nil)
			if err != nil {
				return err
			}
			actions = append(actions, planActions(plan)...)
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if actions == nil {
					actions = []PlanAction{}
				}
				return enc.Encode(map[string]any{"actions": actions})
			}
			return writePlan(cmd.OutOrStdout(), actions)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

// importReason says why a sync would read src, or "" when it would not.
func importReason(src source.Source, leases []runtime.SourceState) string {
	known := false
	for _, st := range leases {
		if st.Source != src.Path || st.Kept {
			continue // a kept import of the same file is a source of its own
		}
		known = true
		if st.Identity == src.Identity && st.Complete {
			if st.Intact {
				return ""
			}
			return "leased content is gone"
		}
	}
	if known {
		return "changed"
	}
	return "new"
}

func planActions(p reconcile.Plan) []PlanAction {
	var out []PlanAction
	for _, pin := range p.Pins {
		action := "heal"
		if pin.Reason == reconcile.ReasonNew {
			action = "pin"
		}
		out = append(out, PlanAction{Action: action, Name: pin.Want.Name, Target: pin.Want.Target.Digest.String(),
			Lease: pin.Lease, Source: pin.Source, Reason: string(pin.Reason)})
	}
	for _, u := range p.Unpins {
		out = append(out, PlanAction{Action: "unpin", Name: u.Name, Reason: string(u.Reason)})
	}
	for _, r := range p.Releases {
		out = append(out, PlanAction{Action: "release", Lease: r.Lease, Source: r.Source, Reason: string(r.Reason)})
	}
	return out
}

func writePlan(w io.Writer, actions []PlanAction) error {
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.Action, subject, src, a.Reason)
	}
	return tw.Flush()
}

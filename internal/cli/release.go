package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/pass"
)

func newRelease(o *options) *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "release SOURCE|IMAGE|PATTERN...",
		Short: "End kept sources (holdfast import): release their leases and unpin what nothing else wants",
		Long: `release ends kept sources, those "holdfast import" made. Each argument names:
  SOURCE   the path a kept source was imported from (as status shows it; the
           file need not exist), or its lease ID
  IMAGE    every kept source that holds an image of that name
  PATTERN  every kept source that holds an image the pattern matches (see holdfast pin --help)
The kept source's lease is deleted, then the images no other source, pin list
or kept source wants are unpinned. A pin a user made stays. Unpinning does not
free disk at once: the CRI keeps its own record of an image until the kubelet's
image GC removes it. Images dir sources are not released this way: delete their
files instead.

Pin and pull lists are judged as their files stand at that moment, not as the
last pass read them: a pattern just added with holdfast pin keeps its images
pinned though no pass has taken it in yet. If a list cannot be read, release
unpins nothing, says why and exits 1; a later pass unpins what no source wants.

While holdfast run owns the data dir, release talks to its containerd; when it
unpins a kept source's image, the agent runs a pass instead of healing it, and
that pass finds the lease gone.

--dry-run lists what release would release and unpin, and changes nothing
(plan does not list kept sources: they are never released by a pass).

Exit status: 0 when every argument named a kept source and all were released,
1 when one named none or a release failed (the others are still released),
2 on bad usage, such as an argument that is neither a kept source nor a valid
pattern (nothing is changed then).`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &usageError{errors.New("release: give at least one source, image or pattern")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, err := o.openReader(ctx, "release")
			if err != nil {
				return err
			}
			defer s.close()
			kept, err := pass.KeptSources(ctx, s.rt)
			if err != nil {
				return err
			}
			chosen, missing, bad := pass.MatchKept(kept, args)
			if bad != nil {
				return &usageError{bad}
			}
			dirs, err := o.layout().ImageDirs(o.images)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			rel, err := pass.ReleaseKept(ctx, s.rt, chosen, pass.ReadStanding(dirs, o.insecurePerms), dryRun)
			verb, unpin := "released", "unpinned"
			if dryRun {
				verb, unpin = "would release", "would unpin"
			}
			for _, st := range rel.Leases {
				fmt.Fprintf(out, "%s %s (lease %s, %d images)\n", verb, st.Source, st.Lease, imageCount(st.Images))
			}
			for _, n := range rel.Unpinned {
				fmt.Fprintf(out, "%s %s\n", unpin, n)
			}
			if err = errors.Join(append(missing, err)...); err != nil {
				return &ExitError{Code: 1, Err: err}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show what would be released and unpinned, change nothing")
	return cmd
}

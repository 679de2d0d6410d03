package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/datadir"
	"github.com/holdfast-project/holdfast/internal/pattern"
	"github.com/holdfast-project/holdfast/internal/source"
)

const patternHelp = `A pattern is an image reference, a prefix ending in "*" or a "*keyword*",
normalised as docker normalises names and matched against full image names:
  nginx                        every tag and digest of docker.io/library/nginx
  nginx:1.25                   that tag only
  registry.example.com/team/*  every image under registry.example.com/team/
  nginx:1.*                    the tags of nginx starting with "1."
  *ingress*                    every image whose full name contains "ingress"`

func newPin(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "pin [PATTERN...]",
		Short: "Pin images matching a pattern (edits <data-dir>/pins/local.pins); without arguments, list the patterns",
		Long: `pin adds each PATTERN to <data-dir>/pins/local.pins, the pin list of this node;
the agent pins every image that matches a pattern of it. A pattern already listed
(in any spelling that normalises the same) is left as it is. Without PATTERN,
pin lists the patterns of local.pins.

` + patternHelp + `

pin and unpin only edit the file: they work while holdfast run owns the data dir.

Exit status: 0 on success, 1 when local.pins can't be read or written (or, when
listing, holds a bad line), 2 on a bad pattern (nothing is changed then).`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f := pinFile(o.dataDir)
			if len(args) == 0 {
				return listPins(cmd.OutOrStdout(), cmd.ErrOrStderr(), f.Path)
			}
			done, err := f.Add(cmd.Context(), args)
			if err != nil {
				return pinError(err)
			}
			// What is said is said once the list is durably written.
			var out bytes.Buffer
			for _, p := range done {
				switch {
				case p.Line == 0:
					fmt.Fprintf(&out, "pinned pattern %q in %s\n", p.Pattern, f.Path)
				case p.Listed == p.Pattern:
					fmt.Fprintf(&out, "pattern %q is already pinned in %s (line %d)\n", p.Pattern, f.Path, p.Line)
				default:
					fmt.Fprintf(&out, "pattern %q is already pinned in %s (line %d: %q)\n", p.Pattern, f.Path, p.Line, p.Listed)
				}
			}
			_, err = out.WriteTo(cmd.OutOrStdout())
			return err
		},
	}
}

func newUnpin(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "unpin PATTERN...",
		Short: "Remove patterns from <data-dir>/pins/local.pins",
		Long: `unpin removes each PATTERN from <data-dir>/pins/local.pins: every line whose
pattern normalises the same (unpin nginx removes a line docker.io/library/nginx).
Images another source or pattern still wants stay pinned. Unpinning does not
free disk at once: the CRI keeps its own record of an image until the kubelet's
image GC removes it.

` + patternHelp + `

Exit status: 0 when every PATTERN was removed, 1 when one was not in the file
(the others are still removed) or the file can't be written, 2 on a bad pattern
(nothing is changed then).`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &usageError{errors.New("unpin: give at least one pattern")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			f := pinFile(o.dataDir)
			done, err := f.Remove(cmd.Context(), args)
			if err != nil {
				return pinError(err)
			}
			var out bytes.Buffer // said once the list is durably written
			for _, raw := range done.Removed {
				fmt.Fprintf(&out, "unpinned pattern %q in %s\n", raw, f.Path)
			}
			if _, err := out.WriteTo(cmd.OutOrStdout()); err != nil {
				return err
			}
			if len(done.Missing) == 0 {
				return nil
			}
			missing := make([]error, len(done.Missing))
			for i, p := range done.Missing {
				missing[i] = fmt.Errorf("pattern %q is not in %s", p, f.Path)
			}
			return &ExitError{Code: 1, Err: errors.Join(missing...)}
		},
	}
}

// pinFile is the pin list that pin and unpin edit: local.pins in the data
// dir's pins dir.
func pinFile(dataDir string) source.PinFile {
	return source.PinFile{Path: datadir.At(dataDir).LocalPins(), DataDir: dataDir}
}

// pinError makes bad patterns a usage error.
func pinError(err error) error {
	var bad *source.PatternsError
	if errors.As(err, &bad) {
		return &usageError{err}
	}
	return err
}

// listPins prints the patterns of a pin list, one per line as written; bad
// lines go to stderr and make it exit 1.
func listPins(out, errOut io.Writer, path string) error {
	l, err := source.ReadPinList(path)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(errOut, "no local pins: %s does not exist\n", path)
		return nil
	}
	if err != nil {
		return err
	}
	for _, p := range l.Patterns {
		fmt.Fprintln(out, p.Raw)
	}
	for _, e := range l.Errors {
		fmt.Fprintf(errOut, "error: %v\n", e)
	}
	if len(l.Errors) > 0 {
		return &ExitError{Code: 1}
	}
	return nil
}

// parsePatterns parses every argument before anything is done; a bad one is
// a usage error.
func parsePatterns(args []string) ([]pattern.Pattern, error) {
	pats, err := pattern.ParseAll(args)
	if err != nil {
		return nil, &usageError{err}
	}
	return pats, nil
}

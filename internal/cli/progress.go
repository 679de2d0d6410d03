package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/flagenv"
	"github.com/holdfast-project/holdfast/internal/progress"
)

// progressFlag is --progress: whether sync and import draw the archives they
// read on the terminal.
type progressFlag string

func (p *progressFlag) String() string { return string(*p) }
func (p *progressFlag) Type() string   { return "auto|always|never" }
func (p *progressFlag) Set(v string) error {
	switch v {
	case "auto", "always", "never":
		*p = progressFlag(v)
		return nil
	}
	return fmt.Errorf("%q: want auto, always or never", v)
}

// addProgressFlag adds --progress (and its environment variable) to cmd,
// setting p to its default, auto.
func addProgressFlag(cmd *cobra.Command, p *progressFlag) {
	*p = "auto"
	cmd.Flags().Var(p, "progress", "draw a line per archive being read, and a total, on standard error: auto (when it is a terminal), always or never; see docs/operations.md#progress-on-a-terminal")
	flagenv.Allow(cmd.Flags(), "progress")
}

// newProgress returns the display of the archives read for cmd's standard
// error, nil when there is none to draw.
func (o *options) newProgress(cmd *cobra.Command, mode progressFlag, total bool) *progress.Display {
	return progress.New(cmd.ErrOrStderr(), string(mode), total, o.logOut)
}

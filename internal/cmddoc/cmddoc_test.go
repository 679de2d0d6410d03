package cmddoc

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestRender: a command tree renders as its help gives it: the index, each
// visible command's section, root's persistent flags as the global ones, the
// variable of a flag in its own column (its part of the help left out), what
// SetDefault says as the default, and markdown's special characters escaped.
func TestRender(t *testing.T) {
	root := &cobra.Command{Use: "tool", Short: "a tool"}
	root.PersistentFlags().String("data-dir", "/home/me/tool", "where it keeps its data (env TOOL_DATA_DIR)")
	SetDefault(root.PersistentFlags(), "data-dir", "/var/lib/tool for root")
	sub := &cobra.Command{Use: "get NAME", Short: "get a <thing>", Run: func(*cobra.Command, []string) {}}
	sub.Flags().StringArray("from", nil, "where from; see docs/operations.md#from (env TOOL_FROM, colon-separated)")
	hidden := &cobra.Command{Use: "secret", Hidden: true, Run: func(*cobra.Command, []string) {}}
	root.AddCommand(sub, hidden)
	env := func(f *pflag.Flag) (EnvVar, bool) {
		switch f.Name {
		case "data-dir":
			return EnvVar{Name: "TOOL_DATA_DIR", Help: "env TOOL_DATA_DIR"}, true
		case "from":
			return EnvVar{Name: "TOOL_FROM", Help: "env TOOL_FROM, colon-separated", List: true}, true
		}
		return EnvVar{}, false
	}
	got := Render(root, env)
	for _, want := range []string{
		"| [`tool get`](#tool-get) | get a \\<thing\\> |\n",
		"\n## tool get\n\nget a \\<thing\\>\n\n```\ntool get NAME [flags]\n```\n",
		"| `--data-dir string` | `TOOL_DATA_DIR` | /var/lib/tool for root | where it keeps its data |\n",
		"| `--from stringArray` | `TOOL_FROM` (colon-separated) |  | where from; see [docs/operations.md#from](operations.md#from) |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered doc lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "secret") {
		t.Errorf("a hidden command is rendered:\n%s", got)
	}
}

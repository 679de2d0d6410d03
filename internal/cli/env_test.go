package cli

import (
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/holdfast-project/holdfast/internal/flagenv"
)

// allFlags returns every flag of every command under root, each named once
// by its command's path: "sync --parallel".
func allFlags(root *cobra.Command) map[string]*pflag.Flag {
	flags := map[string]*pflag.Flag{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			flags[c.CommandPath()+" --"+f.Name] = f
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return flags
}

// TestEnvNames: the environment variables the commands read are these, each
// the flag's name by flagenv.Name's rule, and each flag's help names its variable.
func TestEnvNames(t *testing.T) {
	want := []string{
		"holdfast --address HOLDFAST_ADDRESS",
		"holdfast --content-root HOLDFAST_CONTENT_ROOT",
		"holdfast --data-dir HOLDFAST_DATA_DIR",
		"holdfast --images HOLDFAST_IMAGES",
		"holdfast --insecure-perms HOLDFAST_INSECURE_PERMS",
		"holdfast --log-format HOLDFAST_LOG_FORMAT",
		"holdfast --log-level HOLDFAST_LOG_LEVEL",
		"holdfast --min-free HOLDFAST_MIN_FREE",
		"holdfast --namespace HOLDFAST_NAMESPACE",
		"holdfast --peer-mirror HOLDFAST_PEER_MIRROR",
		"holdfast --peer-registries HOLDFAST_PEER_REGISTRIES",
		"holdfast --policy HOLDFAST_POLICY",
		"holdfast --pull-timeout HOLDFAST_PULL_TIMEOUT",
		"holdfast --registries-yaml HOLDFAST_REGISTRIES_YAML",
		"holdfast --registry-config HOLDFAST_REGISTRY_CONFIG",
		"holdfast --spool HOLDFAST_SPOOL",
		"holdfast --write-path HOLDFAST_WRITE_PATH",
		"holdfast check --kubelet-config HOLDFAST_KUBELET_CONFIG",
		"holdfast export --progress HOLDFAST_PROGRESS",
		"holdfast export --signed-only HOLDFAST_SIGNED_ONLY",
		"holdfast import --progress HOLDFAST_PROGRESS",
		"holdfast run --listen HOLDFAST_LISTEN",
		"holdfast run --parallel HOLDFAST_PARALLEL",
		"holdfast run --peer-grace HOLDFAST_PEER_GRACE",
		"holdfast run --pull-required HOLDFAST_PULL_REQUIRED",
		"holdfast run --resync HOLDFAST_RESYNC",
		"holdfast run --settle HOLDFAST_SETTLE",
		"holdfast run --token-file HOLDFAST_TOKEN_FILE",
		"holdfast sync --parallel HOLDFAST_PARALLEL",
		"holdfast sync --progress HOLDFAST_PROGRESS",
		"holdfast verify --policy HOLDFAST_POLICY",
	}
	var got []string
	for name, f := range allFlags(New("test", "")) {
		env, ok := flagenv.Of(f)
		if !ok {
			if strings.Contains(f.Usage, "HOLDFAST_") {
				t.Errorf("%s: no environment variable, but its help names one: %q", name, f.Usage)
			}
			continue
		}
		got = append(got, name+" "+env)
		if !strings.Contains(f.Usage, "(env "+env) {
			t.Errorf("%s: help %q does not name %s", name, f.Usage, env)
		}
	}
	sort.Strings(got)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("environment variables:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/build"
)

func newVersion(version, commit string) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print holdfast's version, commit, Go, containerd client and modules of note",
		Long: `version prints what a bug report needs: holdfast's version and the commit it
was built from, the Go that built it, its platform, the version of the
containerd client linked in (the containerd server it talks to may be
another), and the modules of note, each with its version or "not linked":
containerd, k8s.io/client-go, sigstore-go, go-containerregistry and runc.

-o json prints all of it and every module of the build info: "program",
"version", "commit", "goVersion", "os", "arch", "containerd" (the client's
version), "noted" (module path to version), "path", "main" and "modules"
(each "path", "version", "sum" and "replace"), and "settings" (the build
settings, each "key" and "value").`,
		Args: cobra.NoArgs,
		// No containerd needed: skip the common set-up.
		PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return &usageError{fmt.Errorf("-o %q: want text or json", output)}
			}
			in := build.Read("holdfast", version, commit)
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(in)
			}
			return in.WriteText(cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

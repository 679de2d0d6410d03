package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/flagenv"
	"github.com/holdfast-project/holdfast/internal/pass"
	"github.com/holdfast-project/holdfast/internal/signature"
	"github.com/holdfast-project/holdfast/internal/source"
)

// VerifyImage is one line of holdfast verify's output: the verdict on one
// name an archive gives an image.
type VerifyImage struct {
	Path   string          `json:"path"`
	Name   string          `json:"name"`
	Digest string          `json:"digest"`
	State  signature.State `json:"state"`
	By     string          `json:"by,omitempty"`
	Reason string          `json:"reason,omitempty"`
}

// verifyHelp is the long help of holdfast verify.
const verifyHelp = `verify checks each image of the archives and bundles it is given against the
signature policy (--policy; see docs/signatures.md), offline: it imports
nothing, needs no containerd and changes nothing. It takes what holdfast import
takes: docker save and OCI archives, compressed or not, OCI layout directories,
Hauler hauls, Zarf packages, cosign layouts (name the image with --name REF)
and split bundles. Each is read whole, every blob checked against its digest,
as an import would read it. With -, the archive is read from standard input
(its images are listed with the path -); /dev/stdin is read as -.

The signatures are the ones the archive carries beside the image: cosign's
.sig manifests (a haul's and a cosign layout's signature entries, the
<repo>:sha256-<hex>.sig tags of a Zarf package or an OCI archive) and
cosign v3 bundle referrers. Signatures, attestations and SBOMs are no images
to check.

For each name the archive gives an image, the first rule of the policy that
matches it applies. With none, the image is unchecked. Else it is verified
when one of its signatures verifies by one of the rule's keys or keyless
identities and names its digest, unsigned when it carries none, and invalid
when none of those it carries verifies (or, none verifying, one cannot be
read). Each image is listed with its path, name, digest, verdict, what
verified it and why.

The policy's mode does not change verify's exit status: what fails verify is
what a pass would refuse under mode enforce (an image unsigned or invalid);
under mode warn a pass would import it all the same, and only report it.

Exit status: 0 when every image a rule applies to is verified (unchecked ones
pass), 1 when any is unsigned or invalid, or a path cannot be read (printed
as "error: verify <path>: <cause>"; the other paths are still checked), 2 on
bad usage or a bad policy (each mistake printed as FILE:LINE: cause).`

func newVerify() *cobra.Command {
	var policyFile, name, output string
	cmd := &cobra.Command{
		Use:   "verify --policy FILE FILE|DIR|-...",
		Short: "Check the signatures of the images in archives and bundles against the policy, importing nothing",
		Long:  verifyHelp,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &usageError{errors.New("verify: give at least one archive or OCI layout directory")}
			}
			if name != "" && len(args) > 1 {
				return &usageError{errors.New("verify: --name names the image of one path; give one")}
			}
			return stdinOnce("verify", args)
		},
		// No containerd and no data dir: only the flags' environment
		// variables are applied.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return applyEnv(cmd) },
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "table" && output != "json" {
				return &usageError{fmt.Errorf("-o %q: want table or json", output)}
			}
			if policyFile == "" {
				return &usageError{fmt.Errorf("verify: --policy is required (or %s)", flagenv.Name("policy"))}
			}
			ctx := cmd.Context()
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			// --insecure-perms is the root's flag, as for every command.
			insecure, _ := cmd.Flags().GetBool("insecure-perms")
			pol, err := signature.LoadWith(policyFile, signature.Options{InsecurePerms: insecure})
			if err != nil {
				for _, e := range flatten(err) {
					fmt.Fprintf(errOut, "error: %v\n", e)
				}
				return &ExitError{Code: 2}
			}
			images := []VerifyImage{}
			failed := false
			for _, path := range args {
				var (
					v   pass.Verified
					err error
				)
				what := path
				if source.IsStdin(path) {
					what = pass.StreamName
					var in io.Reader
					if in, err = stdinOf(ctx, cmd); err == nil {
						v, err = pass.VerifyStream(ctx, pol, in, name)
					}
				} else {
					v, err = pass.Verify(ctx, pol, path, name)
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if err != nil {
					fmt.Fprintf(errOut, "error: verify %s: %v\n", what, err)
					failed = true
					continue
				}
				for _, img := range v.Images {
					if img.State != signature.Verified && img.State != signature.Unchecked {
						failed = true
					}
				}
				images = append(images, verdicts(v)...)
			}
			if output == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				err = enc.Encode(map[string]any{"images": images})
			} else {
				err = writeVerify(out, images)
			}
			if err != nil {
				return err
			}
			if failed {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&policyFile, "policy", "", "the signature policy file (required); see docs/signatures.md")
	f.StringVar(&name, "name", "", "name the image of a cosign layout (cosign save), whose index names none; with --name, give one path")
	f.StringVarP(&output, "output", "o", "table", "table or json")
	flagenv.Allow(f, "policy")
	return cmd
}

// verdicts are the lines of what verify judged.
func verdicts(v pass.Verified) []VerifyImage {
	var out []VerifyImage
	for _, img := range v.Images {
		out = append(out, VerifyImage{Path: v.Path, Name: img.Name, Digest: img.Target.Digest.String(),
			State: img.State, By: img.By, Reason: img.Reason})
	}
	return out
}

// flatten lists the errors errors.Join joined (a policy's mistakes), or err
// alone.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func writeVerify(w io.Writer, images []VerifyImage) error {
	if len(images) == 0 {
		_, err := fmt.Fprintln(w, "no images")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tNAME\tDIGEST\tSTATE\tBY\tREASON")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, img := range images {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", img.Path, img.Name, shortDigest(img.Digest), img.State, dash(img.By), dash(img.Reason))
	}
	return tw.Flush()
}

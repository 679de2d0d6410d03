package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/exporter"
	"github.com/holdfast-project/holdfast/internal/flagenv"
	"github.com/holdfast-project/holdfast/internal/signature"
	"github.com/holdfast-project/holdfast/internal/units"
)

// exportOptions are export's own flags.
type exportOptions struct {
	output      string
	sources     []string
	all         bool
	signedOnly  bool
	compression compressionFlag
	progress    progressFlag
}

func newExport(o *options) *cobra.Command {
	var eo exportOptions
	cmd := &cobra.Command{
		Use:   "export [PATTERN...] [--source PATH]... [--all] [--signed-only] -o FILE",
		Short: "Write images from containerd into one archive that holdfast, K3s and ctr import",
		Long: `export writes images from containerd's store into one archive, FILE: an OCI
image layout tar (oci-layout, index.json, blobs/sha256/...) with a docker save
manifest.json beside it, compressed as seekable zstd. holdfast import and
images dirs, K3s's agent/images dir, "ctr images import" and docker-save
readers all take it, under the same names and at the same digests. Uses: seed
a new node, move images between air-gapped clusters, keep a copy of a node's
kept sources before it is rebuilt.

Which images:
  PATTERN        every image in the store whose name matches (see below)
  --source PATH  every image a source wants: a kept source or an images-dir
                 file, as holdfast status names it (the file need not exist),
                 or its lease ID; repeatable
  --all          every image holdfast pins now (the records carrying its pin
                 label io.holdfast.pinned)
They add up; each PATTERN and --source must give at least one image.

` + patternHelp + `

What is written: one index.json entry per name (annotated
io.containerd.image.name and org.opencontainers.image.ref.name, as containerd's
own exporter does), the blobs each image needs once, and each image's cosign
signatures the store keeps (from the sources' states and <repo>:sha256-<hex>.sig
records), which holdfast import carries over. A multi-platform image is written
as its index with the platforms the store holds whole: on a node, usually its
own platform only. holdfast import and ctr images import take the host
platform, K3s what the file holds (it skips what is missing); ctr images
import --all-platforms would want the others. manifest.json names the host
platform's manifest of it. An image whose own platform is not whole in the
store is an error naming the image and the blob. See docs/bundles.md.

Under a signature policy (the one in force in the namespace, which holdfast
run --policy puts there, or --policy), each image is judged as an enforcing
node would judge it, by the signatures the store keeps for it; every image the
policy refuses (a rule matches it and no signature verifies) is named on
standard error with its digest and why. It is written all the same, unless
--signed-only is given: then it is left out (and when every image chosen is
refused, nothing is written). --signed-only without a policy is bad usage.

The same images give the same bytes: entries sorted, fixed times, owners and
modes, stable JSON, and compression that depends only on its input.

FILE is written beside itself under a hidden .partial name and renamed when
complete: an interrupted export leaves no FILE. With --compression zstd, FILE
must end in .tar.zst or .tzst; with none, in .tar (K3s picks the decoder by the
suffix). -o - writes to standard output, never to a terminal. A summary line
goes to standard error.

Exit status: 0 when FILE was written (also when it holds images the policy
refuses: they are named on standard error), 1 when it was not (nothing is
left), 2 on bad usage.`,
		Args: func(_ *cobra.Command, args []string) error {
			return eo.check(args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.export(cmd, args, &eo)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&eo.output, "output", "o", "", "the archive to write (- for standard output)")
	f.StringArrayVar(&eo.sources, "source", nil, "export the images of this source (a kept source or an images-dir file, as status names it, or its lease ID); repeatable")
	f.BoolVar(&eo.all, "all", false, "export every image holdfast pins")
	f.BoolVar(&eo.signedOnly, "signed-only", false, "leave out the images the signature policy refuses (the policy in force, or --policy); without it they are written and named")
	flagenv.Allow(f, "signed-only")
	eo.compression = "zstd"
	f.Var(&eo.compression, "compression", "zstd (seekable: frames of a few MiB and a seek table) or none")
	addProgressFlag(cmd, &eo.progress)
	return cmd
}

// check refuses what export cannot do before connecting.
func (eo *exportOptions) check(args []string) error {
	switch {
	case eo.output == "":
		return &usageError{errors.New("export: give the archive to write with -o FILE (- for standard output)")}
	case len(args) == 0 && len(eo.sources) == 0 && !eo.all:
		return &usageError{errors.New("export: name the images: PATTERN, --source PATH or --all")}
	case eo.output == "-":
		return nil
	}
	suffixes := exporter.Compression(eo.compression).Suffixes()
	for _, s := range suffixes {
		if strings.HasSuffix(eo.output, s) {
			return nil
		}
	}
	return &usageError{fmt.Errorf("export: with --compression %s, FILE must end in %s (K3s picks the decoder by the suffix): %s", eo.compression, strings.Join(suffixes, " or "), eo.output)}
}

// export chooses, plans and writes.
func (o *options) export(cmd *cobra.Command, args []string, eo *exportOptions) error {
	ctx := cmd.Context()
	pats, err := parsePatterns(args)
	if err != nil {
		return err
	}
	if eo.output == "-" {
		if f, ok := cmd.OutOrStdout().(*os.File); ok && isTerminal(f) {
			return &usageError{errors.New("export: standard output is a terminal; redirect it, or give -o FILE")}
		}
	}
	s, err := o.openReader(ctx, "export")
	if err != nil {
		return err
	}
	defer s.close()
	sel := exporter.Selection{Patterns: pats, Sources: eo.sources, All: eo.all, SignedOnly: eo.signedOnly}
	content := s.rt.ImportStore()
	switch {
	case o.policy != nil:
		sel.Policy = signature.StoreJudge(o.policy, content)
	case eo.signedOnly:
		return &usageError{errors.New("export: --signed-only needs a signature policy: give --policy FILE, or run the agent with one (holdfast run --policy puts it in force)")}
	}
	plan, err := exporter.Prepare(ctx, s.rt, content, sel)
	if err != nil {
		return err
	}
	for _, r := range plan.Refused {
		fmt.Fprintln(cmd.ErrOrStderr(), refusedLine(o.policy, r, eo.signedOnly))
	}
	for _, w := range plan.Warnings {
		o.log.Warn(w)
	}
	for _, l := range plan.LeftOut {
		o.log.Debug("not exported", "what", l)
	}
	if fi, err := os.Stat(eo.output); eo.output != "-" && err == nil && fi.IsDir() {
		return &usageError{fmt.Errorf("export: %s is a directory", eo.output)}
	}
	out, err := exporter.CreateOutput(eo.output, cmd.OutOrStdout())
	if err != nil {
		return err
	}
	defer out.Abort()
	compression := exporter.Compression(eo.compression)
	defer compression.LimitMemory()()
	zw := compression.Writer(out)
	d := o.newProgress(cmd, eo.progress, false)
	d.Start()
	bar := d.Single(eo.output, plan.Bytes)
	st, err := plan.Write(ctx, zw, exporter.WriteOptions{Read: bar.Read})
	bar.Close()
	d.Stop()
	// Closed whatever happened: its workers end with it.
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = out.Commit()
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("exporting to %s: %w", eo.output, err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "exported %s (%s), %s, %s (%s), %s written to %s\n",
		count(plan.Targets, "image"), count(len(plan.Images), "name"), count(plan.Signatures, "signature"),
		count(st.Blobs, "blob"), units.Bytes(st.BlobBytes), units.Bytes(out.Size()), eo.output)
	if n := len(plan.LeftOut); n > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "left out %d manifests of other platforms the store does not hold whole (--log-level debug lists them)\n", n)
	}
	return nil
}

// refusedLine says of an image the policy refuses what export did with it.
func refusedLine(pol *signature.Policy, r exporter.Refusal, signedOnly bool) string {
	what := "refused by the signature policy"
	if pol.Mode != signature.Enforce {
		what = "not verified by the signature policy (mode " + string(pol.Mode) + ")"
	}
	done := "written all the same (--signed-only leaves it out)"
	if signedOnly {
		done = "left out"
	}
	return fmt.Sprintf("image %s (%s) %s: %s; %s", r.Name, r.Target.Digest, what, r.Why, done)
}

// count is n things: "1 image", "2 images".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// compressionFlag is --compression.
type compressionFlag exporter.Compression

func (c *compressionFlag) String() string { return string(*c) }
func (c *compressionFlag) Type() string   { return "zstd|none" }
func (c *compressionFlag) Set(v string) error {
	parsed, err := exporter.ParseCompression(v)
	if err != nil {
		return err
	}
	*c = compressionFlag(parsed)
	return nil
}

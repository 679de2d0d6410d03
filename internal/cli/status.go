package cli

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/pass"
	"github.com/holdfast-project/holdfast/internal/units"
)

func newStatus(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the images in the namespace, whether they are pinned, and which sources want them",
		Long: `status lists every image record in the namespace (not the CRI's own sha256: records):
its CRI image ID, host-platform size, whether it is pinned and whether holdfast owns
the pin, whether the CRI image service (what the kubelet asks) sees it and reports
it pinned, and the sources and leases that want it. While holdfast run owns the
data dir, status attaches to its containerd.

Kept sources (holdfast import, spool dirs) are marked (kept) in the SOURCES
column and listed under the images: KEPT SOURCE, IMPORTED, SIZE (the host
platform's bytes), IMAGES and CONTENT. A kept source missing blobs its images
need is marked (content lost), and CONTENT says how many blobs are missing. In
-o json their sources entries have "kept": true, "importedAt" (RFC 3339) and
"size", a source missing blobs "missing": [digests], and its images
"contentLost": true.

Sources that are bundles (a Hauler haul, a Zarf package, a cosign layout)
are listed under BUNDLE with their kind, their images and the entries left
out as no images (signatures, attestations, SBOMs, referrers, charts, files);
an image the bundle names in another spelling (index.docker.io/...) follows
with that spelling. In -o json sources have "format" and "skipped" (counts
by reason), images "recordedAs".

A record that carries containerd.io/gc.expire, set by another writer, has
"expires" (its time) in -o json: containerd 2.x collects it past that time
unless holdfast pins it.

Unpinning does not free disk at once: the CRI keeps its own record of an image
until the kubelet's image GC removes it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return &usageError{fmt.Errorf("-o %q: want table or json", output)}
			}
			ctx := cmd.Context()
			s, err := o.openReader(ctx, "status")
			if err != nil {
				return err
			}
			defer s.close()
			st, err := pass.ReadStatus(ctx, s.rt, pass.StatusRequest{Namespace: o.namespace, Policy: o.policy, PolicyFile: o.policyFile, InForce: o.policyInForce})
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			return writeTable(cmd.OutOrStdout(), st)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

func writeTable(w io.Writer, st pass.Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tIMAGE ID\tSIZE\tPINNED\tCRI\tSOURCES")
	kept := map[string]bool{}
	lost := map[string]bool{}
	targets := map[string]string{}
	for _, s := range st.Sources {
		kept[s.Path] = kept[s.Path] || s.Kept
		lost[s.Path] = lost[s.Path] || s.Missing != nil
		if s.Target != "" {
			targets[s.Path] = s.Target
		}
	}
	for _, img := range st.Images {
		id := shortDigest(img.ID)
		if id == "" {
			id = "<missing>"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", img.Name, id, units.Bytes(img.Size), pinWord(img), criWord(img), sourcesWord(img.Sources, kept, lost, targets))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeKept(w, st.Sources); err != nil {
		return err
	}
	if err := writeBundles(w, st); err != nil {
		return err
	}
	if err := writeSignatures(w, st); err != nil {
		return err
	}
	fmt.Fprintf(w, "%d images, %d sources\n", len(st.Images), len(st.Sources))
	if st.CRI.Note != "" {
		fmt.Fprintf(w, "note: %s\n", st.CRI.Note)
	}
	return nil
}

// writeKept lists the kept sources under status's table: where each was
// imported from (the file may be gone), when, and the bytes it holds.
func writeKept(w io.Writer, srcs []pass.StatusSource) error {
	var kept []pass.StatusSource
	for _, s := range srcs {
		if s.Kept {
			kept = append(kept, s)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEPT SOURCE\tIMPORTED\tSIZE\tIMAGES\tCONTENT")
	for _, s := range kept {
		content := "complete"
		switch {
		case len(s.Missing) > 0:
			content = fmt.Sprintf("lost (%d blobs missing: import it again)", len(s.Missing))
		case s.Missing != nil:
			content = "lost (import it again)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", s.Path, s.ImportedAt, units.Bytes(s.Size), s.Images, content)
	}
	return tw.Flush()
}

func pinWord(img pass.StatusImage) string {
	switch {
	case img.Owned && img.UserPin:
		return "holdfast+user"
	case img.Owned:
		return "holdfast"
	case img.Pinned:
		return "user"
	}
	return "no"
}

func sourcesWord(srcs []string, kept, lost map[string]bool, targets map[string]string) string {
	if len(srcs) == 0 {
		return "-"
	}
	words := make([]string, len(srcs))
	for i, s := range srcs {
		words[i] = s
		if t := targets[s]; t != "" {
			words[i] += " -> " + t
		}
		if kept[s] {
			words[i] += " (kept)"
		}
		if lost[s] {
			words[i] += " (content lost)"
		}
	}
	return strings.Join(words, ",")
}

// bundleFormats are the archive layouts status lists as bundles.
var bundleFormats = map[string]bool{"hauler-haul": true, "zarf-package": true, "cosign-layout": true}

// writeBundles lists the sources that are bundles: their kind, their images
// as the bundle named them where that differs, and what was skipped.
func writeBundles(w io.Writer, st pass.Status) error {
	var bundles []pass.StatusSource
	for _, s := range st.Sources {
		if bundleFormats[s.Format] {
			bundles = append(bundles, s)
		}
	}
	if len(bundles) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BUNDLE\tKIND\tIMAGES\tSKIPPED")
	for _, s := range bundles {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", s.Path, s.Format, s.Images, cmp.Or(skippedWord(s.Skipped), "-"))
	}
	for _, img := range st.Images {
		for _, r := range img.RecordedAs {
			fmt.Fprintf(tw, "  %s\trecorded as %s\t\t\n", img.Name, r)
		}
	}
	return tw.Flush()
}

// skippedWord is a bundle's skipped entries by reason: "2 signature, 1 chart".
func skippedWord(skipped map[string]int) string {
	var out []string
	for _, r := range slices.Sorted(maps.Keys(skipped)) {
		out = append(out, fmt.Sprintf("%d %s", skipped[r], r))
	}
	return strings.Join(out, ", ")
}

// addSignatures gives each image a source wants the policy's verdict, and
// lists the wants the policy refuses, judged by the signatures the sources
// keep in the store.
// writeSignatures lists, under a policy, each wanted image's verdict and
// the images the policy refuses.
func writeSignatures(w io.Writer, st pass.Status) error {
	var judged []pass.StatusImage
	for _, img := range st.Images {
		if img.Signature != nil {
			judged = append(judged, img)
		}
	}
	if st.Policy == nil {
		return nil
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "signature policy %s, mode %s", st.Policy.Path, st.Policy.Mode)
	if st.Policy.InForceBy != "" {
		fmt.Fprintf(w, ", in force in the namespace (put there by %s)", st.Policy.InForceBy)
	}
	fmt.Fprintln(w)
	if len(judged) == 0 && len(st.Refused) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tSIGNATURE")
	for _, img := range judged {
		fmt.Fprintf(tw, "%s\t%s\n", img.Name, img.Signature)
	}
	for _, r := range st.Refused {
		fmt.Fprintf(tw, "%s\trefused, not pinned (wanted by %s): %s\n", r.Name, r.Source, r.Signature)
	}
	return tw.Flush()
}

// criWord is the CRI column of the status table.
func criWord(img pass.StatusImage) string {
	switch {
	case img.CRI == nil:
		return "-"
	case img.CRI.Pinned:
		return "pinned"
	case img.CRI.Seen:
		return "seen"
	}
	return "unseen"
}

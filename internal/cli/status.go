package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/reconcile"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/signature"
	"github.com/holdfast-project/holdfast/internal/signature/layout"
	"github.com/holdfast-project/holdfast/internal/units"
)

// StatusImage is one record in `status -o json`.
type StatusImage struct {
	Name    string   `json:"name"`
	Digest  string   `json:"digest"` // record target
	ID      string   `json:"id"`     // config digest: the CRI image ID
	Size    int64    `json:"size"`   // host-platform bytes
	Pinned  bool     `json:"pinned"` // io.cri-containerd.pinned
	Owned   bool     `json:"owned"`  // io.holdfast.pinned
	UserPin bool     `json:"userPin,omitempty"`
	Sources []string `json:"sources"`
	Leases  []string `json:"leases"`
	// RecordedAs are the spellings of the name in the bundles that want it,
	// where they differ from it (a haul's index.docker.io/…).
	RecordedAs []string `json:"recordedAs,omitempty"`
	// Conflicts are sources that want this name with another target: the
	// newest source won; their content stays leased while they exist.
	Conflicts []ConflictingSource `json:"conflicts,omitempty"`
	// ContentLost: a source that wants this image at this target is
	// missing blobs in the store (see StatusSource.Missing).
	ContentLost bool `json:"contentLost,omitempty"`
	// CRI is what the CRI image service (what the kubelet asks) reports;
	// absent when there is none.
	CRI *runtime.CRIImage `json:"cri,omitempty"`
	// Signature is the verdict of the signature policy (--policy) on the
	// image, when a source wants it.
	Signature *signature.Verdict `json:"signature,omitempty"`
}

// ConflictingSource is a source that wants a name with a target it did not get.
type ConflictingSource struct {
	Source string `json:"source"`
	Target string `json:"target"`
}

// StatusSource is one source lease in `status -o json`.
type StatusSource struct {
	Path     string `json:"path"`
	Lease    string `json:"lease"`
	Identity string `json:"identity"`
	Complete bool   `json:"complete"`
	Images   int    `json:"images"`
	// Format is the archive's layout: docker-save, oci, docker-hybrid, or a
	// bundle (hauler-haul, zarf-package, cosign-layout). Skipped counts, by
	// reason, a bundle's entries that are no images (signature, chart, …).
	Format  string         `json:"format,omitempty"`
	Skipped map[string]int `json:"skipped,omitempty"`
	// Kept sources (holdfast import) stay until released, whatever becomes
	// of their file; ImportedAt (RFC 3339) and Size (host-platform bytes)
	// are set for them.
	Kept       bool   `json:"kept,omitempty"`
	ImportedAt string `json:"importedAt,omitempty"`
	Size       int64  `json:"size,omitempty"`
	// Target is the file or dir a symlinked source resolves to now (an
	// archive linked into an images dir is followed); empty when Path is
	// not a symlink or no longer resolves.
	Target string `json:"target,omitempty"`
	// Missing are the blobs a complete source needs that the store no
	// longer has: for a kept source, nothing restores them but importing it
	// again (sync fails on it).
	Missing []string `json:"missing,omitempty"`
}

// Status is the whole of `status -o json`.
type Status struct {
	Images  []StatusImage  `json:"images"`
	Sources []StatusSource `json:"sources"`
	CRI     StatusCRI      `json:"cri"`
	// Refused are the images sources want that the signature policy
	// refuses (mode enforce): holdfast does not name or pin them.
	Refused []StatusRefused `json:"refused,omitempty"`
	// Policy is the signature policy the verdicts are by: --policy, or the
	// one an agent put in force in the namespace.
	Policy *StatusPolicy `json:"policy,omitempty"`
}

// StatusPolicy is the signature policy status judges by.
type StatusPolicy struct {
	Path string         `json:"path"`
	Mode signature.Mode `json:"mode"`
	// InForceBy says who put it in force in the namespace, when an agent
	// did (holdfast run --policy).
	InForceBy string `json:"inForceBy,omitempty"`
}

// StatusRefused is an image a source wants that the policy refuses.
type StatusRefused struct {
	Name      string            `json:"name"`
	Target    string            `json:"target"`
	Source    string            `json:"source"`
	Signature signature.Verdict `json:"signature"`
}

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
			imgs, err := s.rt.Images(ctx)
			if err != nil {
				return err
			}
			srcs, err := s.rt.Sources(ctx)
			if err != nil {
				return err
			}
			st := buildStatus(imgs, srcs)
			if o.policy != nil {
				st.Policy = &StatusPolicy{Path: o.policyFile, Mode: o.policy.Mode}
				if o.policyInForce != nil && o.policyInForce.Path == o.policyFile {
					st.Policy.InForceBy = o.policyInForce.By
				}
				addSignatures(ctx, o.policy, s.rt.ImportStore(), srcs, &st)
			}
			addTargets(&st)
			addCRI(ctx, s.rt, o.namespace, &st)
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

func buildStatus(imgs []runtime.ImageDetail, srcs []runtime.SourceState) Status {
	type claim struct {
		state    runtime.SourceState
		target   string
		recorded string
	}
	wantedBy := map[string][]claim{}
	st := Status{Images: []StatusImage{}, Sources: []StatusSource{}}
	for _, s := range srcs {
		ss := StatusSource{Path: s.Source, Lease: s.Lease, Identity: s.Identity, Complete: s.Complete, Images: len(s.Images), Format: s.Format, Skipped: s.Skipped}
		if s.Kept {
			ss.Kept, ss.ImportedAt, ss.Size = true, s.ImportedAt.UTC().Format(time.RFC3339), s.Size
		}
		if s.Complete && !s.Intact {
			ss.Missing = []string{}
			for _, d := range s.Missing {
				ss.Missing = append(ss.Missing, d.String())
			}
		}
		st.Sources = append(st.Sources, ss)
		for _, w := range s.Images {
			wantedBy[w.Name] = append(wantedBy[w.Name], claim{s, w.Target.Digest.String(), w.Recorded})
		}
	}
	for _, img := range imgs {
		si := StatusImage{
			Name:    img.Name,
			Digest:  img.Target.Digest.String(),
			ID:      img.ConfigDigest.String(),
			Size:    img.Size,
			Pinned:  img.Pinned(),
			Owned:   img.Owned(),
			UserPin: img.Labels[runtime.LabelPriorPin] == "true" || (img.Pinned() && !img.Owned()),
			Sources: []string{},
			Leases:  []string{},
		}
		for _, c := range wantedBy[img.Name] {
			si.Sources = append(si.Sources, c.state.Source)
			si.Leases = append(si.Leases, c.state.Lease)
			if c.recorded != "" && !slices.Contains(si.RecordedAs, c.recorded) {
				si.RecordedAs = append(si.RecordedAs, c.recorded)
			}
			if c.target != si.Digest {
				si.Conflicts = append(si.Conflicts, ConflictingSource{Source: c.state.Source, Target: c.target})
			} else if c.state.Complete && !c.state.Intact {
				si.ContentLost = true
			}
		}
		sort.Strings(si.Sources)
		sort.Strings(si.Leases)
		st.Images = append(st.Images, si)
	}
	return st
}

// addTargets sets the Target of each source whose path is, or runs
// through, a symlink.
func addTargets(st *Status) {
	for i := range st.Sources {
		p := st.Sources[i].Path
		if real, err := filepath.EvalSymlinks(p); err == nil && real != filepath.Clean(p) {
			st.Sources[i].Target = real
		}
	}
}

func writeTable(w io.Writer, st Status) error {
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

func pinWord(img StatusImage) string {
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
func writeBundles(w io.Writer, st Status) error {
	var bundles []StatusSource
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
func addSignatures(ctx context.Context, pol *signature.Policy, store layout.BlobReader, srcs []runtime.SourceState, st *Status) {
	judge := signature.Judge{Policy: pol, Blobs: layout.StoreBlobs(store)}
	judgment := judge.For(ctx, srcs)
	for i := range st.Images {
		img := &st.Images[i]
		if len(img.Sources) == 0 {
			continue
		}
		v := judgment.Of(img.Name, ocispec.Descriptor{Digest: digest.Digest(img.Digest)})
		img.Signature = &v
	}
	var refused []reconcile.Refusal
	verdicts := map[string]signature.Verdict{}
	for _, s := range srcs {
		for _, w := range s.Images {
			if v := judgment.Of(w.Name, w.Target); pol.Mode.Refuses(v) {
				refused = append(refused, reconcile.Refusal{Name: w.Name, Target: w.Target.Digest.String(), Source: s.Source})
				verdicts[w.Name+"\x00"+w.Target.Digest.String()] = v
			}
		}
	}
	for _, r := range reconcile.Tagged(refused) {
		st.Refused = append(st.Refused, StatusRefused{Name: r.Name, Target: r.Target, Source: r.Source, Signature: verdicts[r.Name+"\x00"+r.Target]})
	}
	sort.Slice(st.Refused, func(i, j int) bool {
		a, b := st.Refused[i], st.Refused[j]
		return a.Name < b.Name || a.Name == b.Name && a.Source < b.Source
	})
}

// writeSignatures lists, under a policy, each wanted image's verdict and
// the images the policy refuses.
func writeSignatures(w io.Writer, st Status) error {
	var judged []StatusImage
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

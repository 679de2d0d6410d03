package pass

import (
	"context"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/reconcile"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/signature"
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
	// Expires is the record's containerd.io/gc.expire, set by another
	// writer: containerd 2.x collects the record past it unless holdfast
	// pins it (holdfast's lease of records holds it then).
	Expires string `json:"expires,omitempty"`
	// CRI is what the CRI image service (what the kubelet asks) reports;
	// absent when there is none.
	CRI *hfruntime.CRIImage `json:"cri,omitempty"`
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

// StatusRequest is what ReadStatus judges by and how it names the
// namespace.
type StatusRequest struct {
	Namespace string
	// Policy judges the images sources want; nil judges nothing.
	Policy     *signature.Policy
	PolicyFile string
	// InForce is the policy in force in the namespace, when the caller
	// judges by it (signature.Adopt).
	InForce *hfruntime.PolicyInForce
}

// ReadStatus is what holdfast status shows: every record in the namespace
// with the sources that want it, every source lease, the CRI's view and,
// under a policy, the verdicts and the refusals, which are those a pass
// makes (reconcile.Diff over every lease as it is).
func ReadStatus(ctx context.Context, rt hfruntime.Backend, req StatusRequest) (Status, error) {
	imgs, err := rt.Images(ctx)
	if err != nil {
		return Status{}, err
	}
	srcs, err := rt.Sources(ctx)
	if err != nil {
		return Status{}, err
	}
	st := statusOf(imgs, srcs)
	if req.Policy != nil {
		st.Policy = &StatusPolicy{Path: req.PolicyFile, Mode: req.Policy.Mode}
		if req.InForce != nil && req.InForce.Path == req.PolicyFile {
			st.Policy.InForceBy = req.InForce.By
		}
		records := make([]hfruntime.Image, len(imgs))
		for i, img := range imgs {
			records[i] = img.Image
		}
		judge := signature.Judge{Policy: req.Policy, Blobs: rt.ImportStore()}
		addSignatures(judge.For(ctx, srcs), srcs, records, &st)
	}
	addTargets(&st)
	addCRI(ctx, rt, req.Namespace, &st)
	return st, nil
}

// statusOf is the records and the source leases as status shows them,
// before verdicts, symlinks and the CRI.
func statusOf(imgs []hfruntime.ImageDetail, srcs []hfruntime.SourceState) Status {
	type claim struct {
		state    hfruntime.SourceState
		target   string
		recorded string
	}
	wantedBy := map[string][]claim{}
	// The records of the images' signatures a source names: no images.
	signs := map[string]bool{}
	st := Status{Images: []StatusImage{}, Sources: []StatusSource{}}
	for _, s := range srcs {
		ss := StatusSource{Path: s.Source, Lease: s.Lease, Identity: s.Identity, Complete: s.Complete, Format: s.Format, Skipped: s.Skipped}
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
			if w.Signs != "" {
				signs[w.Name] = true
				continue
			}
			st.Sources[len(st.Sources)-1].Images++
			wantedBy[w.Name] = append(wantedBy[w.Name], claim{s, w.Target.Digest.String(), w.Recorded})
		}
	}
	for _, img := range imgs {
		if signs[img.Name] && len(wantedBy[img.Name]) == 0 {
			continue
		}
		si := StatusImage{
			Name:    img.Name,
			Digest:  img.Target.Digest.String(),
			ID:      img.ConfigDigest.String(),
			Size:    img.Size,
			Pinned:  img.Pinned(),
			Owned:   img.Owned(),
			UserPin: img.Labels[hfruntime.LabelPriorPin] == "true" || (img.Pinned() && !img.Owned()),
			Expires: img.Labels[hfruntime.LabelExpire],
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

// addSignatures gives each image a source wants the policy's verdict, and
// lists the wants the policy refuses, as a pass refuses them: those of the
// plan of every lease as it is, judged by the signatures the sources keep in
// the store.
func addSignatures(judgment *signature.Judgment, srcs []hfruntime.SourceState, records []hfruntime.Image, st *Status) {
	for i := range st.Images {
		img := &st.Images[i]
		if len(img.Sources) == 0 {
			continue
		}
		v := judgment.Of(img.Name, ocispec.Descriptor{Digest: digest.Digest(img.Digest)})
		img.Signature = &v
	}
	plan := planAsIs(srcs, records, nil, judgment.Refuses)
	for _, r := range reconcile.Tagged(plan.Refusals) {
		v := judgment.Of(r.Name, ocispec.Descriptor{Digest: digest.Digest(r.Target)})
		st.Refused = append(st.Refused, StatusRefused{Name: r.Name, Target: r.Target, Source: r.Source, Signature: v})
	}
	sort.Slice(st.Refused, func(i, j int) bool {
		a, b := st.Refused[i], st.Refused[j]
		return a.Name < b.Name || a.Name == b.Name && a.Source < b.Source
	})
}

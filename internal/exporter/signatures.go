package exporter

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/signature/layout"
)

// signatures are the signature manifests an export carries: their
// index.json entries and their blobs.
type signatures struct {
	entries   []ocispec.Descriptor
	blobs     []ocispec.Descriptor
	manifests int
	notes     []string
}

// findSignatures finds, for each exported image, the cosign signatures
// the store keeps for it, as holdfast keeps them: the signature manifests
// a source's state lists for the image (carried by an archive, or found
// by a pull), and records named with cosign's tag of the image
// (<repo>:sha256-<hex>.sig). Only those that claim the image are taken
// (layout.Finder, as an import and a policy find them).
//
// A tag-scheme signature is written as the tag <repo>:sha256-<hex>.sig of
// each repository the image is exported under; a referrer (cosign v3) as
// an unnamed entry marked with its subject, as containerd's exporter
// marks referrers. holdfast import finds both again and keeps them; ctr
// and K3s make a record of the first and nothing of the second.
func findSignatures(ctx context.Context, c runtime.Content, targets []ocispec.Descriptor, names map[digest.Digest][]string, records []runtime.Image, states []runtime.SourceState) signatures {
	var out signatures
	candidates := signatureCandidates(records, states)
	written := map[digest.Digest]bool{}
	for _, t := range targets {
		cs := candidates[t.Digest]
		if len(cs) == 0 {
			continue
		}
		sigs, errs := layout.NewFinder(ctx, cs, c).Find(t)
		for _, err := range errs {
			out.notes = append(out.notes, fmt.Sprintf("%s: a signature left out: %v", names[t.Digest][0], err))
		}
		byManifest := map[digest.Digest][]layout.Signature{}
		for _, s := range sigs {
			byManifest[s.Manifest.Digest] = append(byManifest[s.Manifest.Digest], s)
		}
		for _, d := range slices.Sorted(maps.Keys(byManifest)) {
			entries, blobs, err := signatureOf(ctx, c, t, byManifest[d], names[t.Digest])
			if err != nil {
				out.notes = append(out.notes, fmt.Sprintf("%s: signature manifest %s left out: %v", names[t.Digest][0], d, err))
				continue
			}
			out.entries = append(out.entries, entries...)
			out.blobs = append(out.blobs, blobs...)
			if !written[d] {
				written[d] = true
				out.manifests++
			}
		}
	}
	return out
}

// signatureCandidates are, by image digest, the manifests that may sign
// it: those the sources' states list for it, and the records named with
// its cosign tag, each carrying its name. A record a source names its
// image's signatures by (Want.Signs) is left out: it names a copy for the
// peers of a manifest the state lists.
func signatureCandidates(records []runtime.Image, states []runtime.SourceState) map[digest.Digest][]ocispec.Descriptor {
	out := map[digest.Digest][]ocispec.Descriptor{}
	own := map[string]map[digest.Digest]bool{}
	add := func(t digest.Digest, d ocispec.Descriptor) {
		if !slices.ContainsFunc(out[t], func(o ocispec.Descriptor) bool {
			return o.Digest == d.Digest && o.Annotations[oci.AnnotationRefName] == d.Annotations[oci.AnnotationRefName]
		}) {
			out[t] = append(out[t], d)
		}
	}
	for _, st := range states {
		for t, ds := range st.Signatures {
			for _, d := range ds {
				add(t, d)
			}
		}
		for _, w := range st.Images {
			for _, d := range w.Signatures {
				add(w.Target.Digest, d)
			}
			if w.Signs != "" {
				if own[w.Name] == nil {
					own[w.Name] = map[digest.Digest]bool{}
				}
				own[w.Name][w.Target.Digest] = true
			}
		}
	}
	for _, r := range records {
		t, ok := signatureTagOf(r.Name)
		if !ok || own[r.Name][r.Target.Digest] {
			continue
		}
		d := r.Target
		d.Annotations = map[string]string{oci.AnnotationRefName: r.Name}
		add(t, d)
	}
	return out
}

// signatureTagOf is the image a name with cosign's signature tag
// (<repo>:sha256-<hex>.sig) signs.
func signatureTagOf(name string) (digest.Digest, bool) {
	tag, ok := oci.ParseCosignTag(name)
	if !ok || tag.Kind != oci.TagSignature || tag.Image == "" {
		return "", false
	}
	return tag.Image, true
}

// signatureOf is the index.json entries and the blobs of one signature
// manifest of image t: the manifest, the signatures found in it, and its
// other blobs the store holds (its config). One the store does not hold
// (a source kept before holdfast kept signature configs) is left to the
// check of the whole layout (whole), which fails the export naming it.
func signatureOf(ctx context.Context, c runtime.Content, t ocispec.Descriptor, sigs []layout.Signature, names []string) ([]ocispec.Descriptor, []ocispec.Descriptor, error) {
	md := sigs[0].Manifest
	raw, err := c.ReadBlob(ctx, md)
	if err != nil {
		return nil, nil, err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, fmt.Errorf("parsing it: %w", err)
	}
	mt := m.MediaType
	if mt == "" {
		mt = md.MediaType
	}
	if mt == "" {
		mt = ocispec.MediaTypeImageManifest
	}
	desc := ocispec.Descriptor{MediaType: mt, Digest: md.Digest, Size: int64(len(raw))}
	blobs := []ocispec.Descriptor{desc}
	for _, s := range sigs {
		blobs = append(blobs, ocispec.Descriptor{MediaType: s.Layer.MediaType, Digest: s.Layer.Digest, Size: int64(len(s.Content))})
	}
	for _, o := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		if slices.ContainsFunc(blobs, func(b ocispec.Descriptor) bool { return b.Digest == o.Digest }) {
			continue
		}
		if has, err := c.Has(ctx, o.Digest); err == nil && has {
			blobs = append(blobs, ocispec.Descriptor{MediaType: o.MediaType, Digest: o.Digest, Size: o.Size})
		}
	}
	if m.Subject != nil {
		e := desc
		e.ArtifactType = m.ArtifactType
		e.Annotations = map[string]string{oci.AnnotationManifestSubject: t.Digest.String()}
		return []ocispec.Descriptor{e}, blobs, nil
	}
	var entries []ocispec.Descriptor
	for _, repo := range repositories(names) {
		tag := oci.SignatureTag(t.Digest)
		e := desc
		e.Annotations = map[string]string{oci.AnnotationImageName: repo + ":" + tag, oci.AnnotationRefName: tag}
		entries = append(entries, e)
	}
	return entries, blobs, nil
}

// repositories are the repositories of names, sorted, each once.
func repositories(names []string) []string {
	var out []string
	for _, n := range names {
		ref, err := reference.ParseNormalizedNamed(n)
		if err != nil {
			continue
		}
		out = append(out, ref.Name())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

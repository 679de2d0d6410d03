package exporter

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// referrers are the referrers besides signatures an export carries: their
// index.json entries and their blobs.
type referrers struct {
	entries []ocispec.Descriptor
	blobs   []ocispec.Descriptor
	notes   []string
}

// findReferrers finds, for each exported image, the referrers the
// sources' states keep of it (an SBOM, the signatures of its platforms'
// manifests and of its referrers), and lays each out as an unnamed
// index.json entry marked with its subject, as containerd's exporter marks
// referrers, with the blobs it names. held are the blobs the layout holds
// already: a referrer whose subject the export leaves out (a platform the
// store does not hold whole) is left out too, and so is one whose manifest
// or blob the store cannot give whole, named in notes; its own referrers
// go with it. have are the entries written already (signatures): those
// are not written twice.
func findReferrers(ctx context.Context, c runtime.Content, targets []ocispec.Descriptor, names map[digest.Digest][]string, states []runtime.SourceState, held map[digest.Digest]bool, have []ocispec.Descriptor) referrers {
	var out referrers
	subjects := maps.Clone(held)
	for _, e := range have {
		subjects[e.Digest] = true
	}
	written := map[digest.Digest]bool{}
	for _, t := range targets {
		kept := referrersOf(states, t.Digest)
		// Subjects before their referrers: a pass takes those whose
		// subject is laid out, until none is left to take.
		for progress := true; progress; {
			progress = false
			for i, r := range kept {
				if r.Digest == "" || !subjects[digest.Digest(r.Annotations[oci.AnnotationManifestSubject])] {
					continue
				}
				kept[i].Digest, progress = "", true
				if written[r.Digest] || slices.ContainsFunc(have, func(e ocispec.Descriptor) bool { return sameEntry(e, r) }) {
					continue
				}
				blobs, err := referrerBlobs(ctx, c, r)
				if err != nil {
					out.notes = append(out.notes, fmt.Sprintf("%s: referrer %s left out: %v", names[t.Digest][0], r.Digest, err))
					continue
				}
				written[r.Digest], subjects[r.Digest] = true, true
				e := ocispec.Descriptor{MediaType: r.MediaType, Digest: r.Digest, Size: r.Size, ArtifactType: r.ArtifactType,
					Annotations: map[string]string{oci.AnnotationManifestSubject: r.Annotations[oci.AnnotationManifestSubject]}}
				out.entries = append(out.entries, e)
				out.blobs = append(out.blobs, blobs...)
			}
		}
	}
	return out
}

// sameEntry says whether the entry e is the referrer r: the same manifest
// of the same subject.
func sameEntry(e, r ocispec.Descriptor) bool {
	s := e.Annotations[oci.AnnotationManifestSubject]
	return e.Digest == r.Digest && s != "" && s == r.Annotations[oci.AnnotationManifestSubject]
}

// referrersOf are the referrers the states keep of image t, each once, in
// the order they were kept.
func referrersOf(states []runtime.SourceState, t digest.Digest) []ocispec.Descriptor {
	var out []ocispec.Descriptor
	for _, st := range states {
		for _, r := range st.Referrers[t] {
			if r.Digest.Validate() != nil || r.Annotations[oci.AnnotationManifestSubject] == "" {
				continue
			}
			if !slices.ContainsFunc(out, func(o ocispec.Descriptor) bool { return sameEntry(o, r) }) {
				out = append(out, r)
			}
		}
	}
	return out
}

// referrerBlobs are the blobs of the referrer manifest r: the manifest and
// each blob it names, every one in the store; an error names the first
// that is not, or a manifest that cannot be read.
func referrerBlobs(ctx context.Context, c runtime.Content, r ocispec.Descriptor) ([]ocispec.Descriptor, error) {
	if r.Size <= 0 || r.Size > maxDocSize {
		return nil, fmt.Errorf("its size %d is not that of a manifest (at most %d bytes)", r.Size, maxDocSize)
	}
	raw, err := c.ReadBlob(ctx, r)
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) != r.Size || digest.FromBytes(raw) != r.Digest {
		return nil, fmt.Errorf("the store's copy does not match its digest")
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("parsing it: %w", err)
	}
	out := []ocispec.Descriptor{{MediaType: r.MediaType, Digest: r.Digest, Size: r.Size}}
	for _, b := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		if slices.ContainsFunc(out, func(o ocispec.Descriptor) bool { return o.Digest == b.Digest }) {
			continue
		}
		if err := b.Digest.Validate(); err != nil {
			return nil, fmt.Errorf("it names %s %q: %w", oci.Kind(b.MediaType), b.Digest, err)
		}
		has, err := c.Has(ctx, b.Digest)
		if err != nil {
			return nil, err
		}
		if !has {
			return nil, fmt.Errorf("its %s %s is not in the store", oci.Kind(b.MediaType), b.Digest)
		}
		out = append(out, ocispec.Descriptor{MediaType: b.MediaType, Digest: b.Digest, Size: b.Size})
	}
	return out, nil
}

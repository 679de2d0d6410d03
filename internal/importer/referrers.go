package importer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/archive"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// maxReferrerDepth is how far an import follows referrers from an image:
// the referrers of the image and of its manifests (an SBOM, the signatures
// of its platforms' manifests), and theirs (the SBOM's signature). A
// referrer of those is left in the archive.
const maxReferrerDepth = 2

// maxReferrers bounds the referrers an import keeps of one image; the rest
// are left out, and named.
const maxReferrers = 256

// keptReferrers are the referrers an import keeps of its images besides
// their signatures.
type keptReferrers struct {
	// byImage are the referrer manifests by image target, each with its
	// subject in its annotations (oci.AnnotationManifestSubject).
	byImage map[digest.Digest][]ocispec.Descriptor
	// blobs are every blob of them (each manifest, its config, its
	// layers), for the state's list of what the source needs.
	blobs []digest.Digest
}

// referrer is a manifest of the walk whose subject is another: its
// descriptor as index.json lists a referrer, and the blobs it names.
type referrer struct {
	desc     ocispec.Descriptor
	subject  digest.Digest
	children []ocispec.Descriptor
}

// keepReferrers keeps, through k, the referrers the walk holds of each of
// its images (cosign's tags aside) other than the signatures kept of it
// (sigs): those whose subject is the image or a manifest of it, and those
// whose subject is one of these, to maxReferrerDepth; each with every blob
// it names, so that an export carries them as they came. What counts as a
// signature for a policy is left as it is: these are only carried. A
// referrer whose blob is neither in the archive nor in the store is left
// out (and those of it), named in res.Skipped; nothing else is.
func keepReferrers(ctx context.Context, k *keeper, walked *archive.Result, need []oci.BlobRef, sigs map[digest.Digest][]ocispec.Descriptor, res *runtime.ImportResult) (keptReferrers, error) {
	images := map[digest.Digest]bool{}
	for _, ref := range need {
		images[ref.Desc.Digest] = true
	}
	bySubject := referrersBySubject(walked.Docs, images)
	var out keptReferrers
	if len(bySubject) == 0 {
		return out, nil
	}
	out.byImage = map[digest.Digest][]ocispec.Descriptor{}
	done := map[digest.Digest]bool{}
	for _, img := range walked.Images {
		t := img.Target.Digest
		if _, tag := oci.ParseCosignTag(img.Name); tag || done[t] {
			continue
		}
		done[t] = true
		isSig := func(d digest.Digest) bool {
			return slices.ContainsFunc(sigs[t], func(s ocispec.Descriptor) bool { return s.Digest == d })
		}
		subjects := imageManifests(walked.Docs, img.Target)
		for depth := 1; depth <= maxReferrerDepth && len(subjects) > 0; depth++ {
			var next []digest.Digest
			for _, sub := range subjects {
				for _, r := range bySubject[sub] {
					if isSig(r.desc.Digest) || slices.ContainsFunc(out.byImage[t], func(d ocispec.Descriptor) bool { return d.Digest == r.desc.Digest }) {
						continue
					}
					if len(out.byImage[t]) >= maxReferrers {
						res.Skipped = append(res.Skipped, fmt.Sprintf("%s: referrer of %s left out: it has more than %d", r.desc.Digest, img.Name, maxReferrers))
						continue
					}
					why, err := keepReferrer(ctx, k, walked, r)
					if err != nil {
						return keptReferrers{}, err
					}
					if why != "" {
						res.Skipped = append(res.Skipped, fmt.Sprintf("%s: referrer of %s left out: %s", r.desc.Digest, img.Name, why))
						continue
					}
					out.byImage[t] = append(out.byImage[t], r.desc)
					for _, c := range append([]ocispec.Descriptor{r.desc}, r.children...) {
						if !slices.Contains(out.blobs, c.Digest) {
							out.blobs = append(out.blobs, c.Digest)
						}
					}
					next = append(next, r.desc.Digest)
				}
			}
			subjects = next
		}
	}
	return out, nil
}

// keepReferrer writes r's blobs and then r through k, once each is known
// to be there: it says why not when one is neither in the archive nor in
// the store (nothing of r is written then).
func keepReferrer(ctx context.Context, k *keeper, walked *archive.Result, r referrer) (string, error) {
	for _, c := range r.children {
		has, err := k.present(ctx, c.Digest)
		if err != nil {
			return "", err
		}
		if !has {
			return fmt.Sprintf("its %s %s is neither in the archive nor in the store", oci.Kind(c.MediaType), c.Digest), nil
		}
	}
	for _, c := range r.children {
		if _, err := k.keep(ctx, c, nil, "referrer"); err != nil {
			return "", err
		}
	}
	_, err := k.keep(ctx, r.desc, walked.Docs[r.desc.Digest], "referrer")
	return "", err
}

// referrersBySubject are the manifests among docs that have a subject,
// by subject digest, sorted by digest; the images' own documents (images)
// are none.
func referrersBySubject(docs map[digest.Digest][]byte, images map[digest.Digest]bool) map[digest.Digest][]referrer {
	out := map[digest.Digest][]referrer{}
	for _, d := range slices.Sorted(maps.Keys(docs)) {
		if images[d] {
			continue
		}
		if r, ok := referrerIn(d, docs[d]); ok {
			out[r.subject] = append(out[r.subject], r)
		}
	}
	return out
}

// referrerIn reads the document b (digest d) as a referrer: a manifest
// with a subject.
func referrerIn(d digest.Digest, b []byte) (referrer, bool) {
	if !bytes.Contains(b, []byte(`"subject"`)) {
		return referrer{}, false
	}
	var m ocispec.Manifest
	if json.Unmarshal(b, &m) != nil || m.Subject == nil || m.Subject.Digest.Validate() != nil {
		return referrer{}, false
	}
	mt := m.MediaType
	switch {
	case oci.IsManifest(mt) && !oci.IsIndex(mt):
	case mt == "" && m.Config.Digest != "":
		mt = ocispec.MediaTypeImageManifest
	default:
		return referrer{}, false
	}
	r := referrer{
		desc: ocispec.Descriptor{MediaType: mt, Digest: d, Size: int64(len(b)), ArtifactType: oci.ArtifactType(m),
			Annotations: map[string]string{oci.AnnotationManifestSubject: m.Subject.Digest.String()}},
		subject: m.Subject.Digest,
	}
	for _, c := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		if c.Digest.Validate() != nil {
			return referrer{}, false
		}
		if !slices.ContainsFunc(r.children, func(o ocispec.Descriptor) bool { return o.Digest == c.Digest }) {
			r.children = append(r.children, ocispec.Descriptor{MediaType: c.MediaType, Digest: c.Digest, Size: c.Size})
		}
	}
	return r, true
}

// imageManifests are the target and the manifests of it the walk read (an
// index's, and theirs for an index of indexes), each once.
func imageManifests(docs map[digest.Digest][]byte, target ocispec.Descriptor) []digest.Digest {
	out := []digest.Digest{target.Digest}
	for i := 0; i < len(out); i++ {
		var idx ocispec.Index
		if b, ok := docs[out[i]]; !ok || json.Unmarshal(b, &idx) != nil {
			continue
		}
		for _, m := range idx.Manifests {
			if !slices.Contains(out, m.Digest) {
				out = append(out, m.Digest)
			}
		}
	}
	return out
}

// keeper writes the small blobs an import keeps besides its images
// (signatures, referrers), each once: those the walk read whole, or leases
// those it gave the sink or the store held.
type keeper struct {
	s      runtime.Store
	sink   runtime.Sink
	walked *archive.Result
	done   map[digest.Digest]bool
	// toLease are the blobs that were in the store already, or that the
	// sink did not commit, for the lease.
	toLease []digest.Digest
}

func newKeeper(s runtime.Store, sink runtime.Sink, walked *archive.Result) *keeper {
	return &keeper{s: s, sink: sink, walked: walked, done: map[digest.Digest]bool{}}
}

// present says whether the blob d is in the walk or in the store.
func (k *keeper) present(ctx context.Context, d digest.Digest) (bool, error) {
	if kept, ok := k.done[d]; ok {
		return kept, nil
	}
	if _, ok := k.walked.Docs[d]; ok {
		return true, nil
	}
	if _, ok := k.walked.Blobs[d]; ok {
		return true, nil
	}
	has, err := k.s.Has(ctx, d)
	if err != nil {
		return false, fmt.Errorf("checking blob %s: %w", d, err)
	}
	return has, nil
}

// keep writes a small blob (data, else what the walk read whole of it), or
// leases one the walk gave the sink or the store held; it says whether the
// blob is in the store now. what names what it is part of in an error.
func (k *keeper) keep(ctx context.Context, desc ocispec.Descriptor, data []byte, what string) (bool, error) {
	if kept, ok := k.done[desc.Digest]; ok {
		return kept, nil
	}
	if data == nil {
		var ok bool
		if data, ok = k.walked.Docs[desc.Digest]; !ok {
			if _, ok := k.walked.Blobs[desc.Digest]; ok {
				// Given to the sink as a blob: on the lease once committed.
				if !k.sink.Committed(desc.Digest) {
					k.toLease = append(k.toLease, desc.Digest)
				}
				k.done[desc.Digest] = true
				return true, nil
			}
			has, err := k.s.Has(ctx, desc.Digest)
			if err != nil {
				return false, fmt.Errorf("checking %s blob %s: %w", what, desc.Digest, err)
			}
			if has {
				k.toLease = append(k.toLease, desc.Digest)
			}
			k.done[desc.Digest] = has
			return has, nil
		}
	}
	desc.Size = int64(len(data))
	committed, err := k.sink.WriteDoc(ctx, desc, data, nil)
	if err != nil {
		return false, fmt.Errorf("keeping %s %s: %w", what, desc.Digest, err)
	}
	if !committed {
		k.toLease = append(k.toLease, desc.Digest)
	}
	k.done[desc.Digest] = true
	return true, nil
}

// referrersKept says whether a state keeps what its source carried of its
// images' referrers: one written before holdfast kept them, of a source
// that skipped referrers, does not, and its source is imported again.
func referrersKept(st runtime.SourceState) bool {
	return st.ReferrersKept || st.Skipped["referrer"] == 0
}

package importer

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/signature/layout"
)

// signatureRecords are the records that name the signatures an import
// keeps, so that a registry mirror sharing content between nodes (spegel,
// which serves a tag only where a record of that name exists) serves them as
// a registry would.
type signatureRecords struct {
	wants []runtime.Want
	// blobs are the referrers indexes written, which the source needs;
	// toLease those of them the store held already.
	blobs, toLease []digest.Digest
	// names are the records' names of every blob they hold, for the
	// distribution source labels a mirror reads.
	names runtime.Names
}

// recordSignatures makes, for each image of wants with kept signatures
// and each repository it is named in, the wants that name them (Signs
// is the image's target): <repo>:sha256-<hex>.sig at its simple-signing
// manifest, as cosign names it, and the referrers tag <repo>:sha256-<hex> at
// an index of its bundle referrers (oci.ReferrersIndex), which it writes
// through sink. A name wants gives an image already is left to it.
func recordSignatures(ctx context.Context, sink runtime.Sink, wants []runtime.Want, kept keptSignatures, docs map[digest.Digest][]byte) (signatureRecords, error) {
	out := signatureRecords{names: runtime.Names{}}
	taken := map[string]bool{}
	repos := map[digest.Digest][]string{}
	for _, w := range wants {
		taken[w.Name] = true
		if _, tag := oci.ParseCosignTag(w.Name); !tag && w.Signs == "" {
			if r := oci.Repository(w.Name); !slices.Contains(repos[w.Target.Digest], r) {
				repos[w.Target.Digest] = append(repos[w.Target.Digest], r)
			}
		}
	}
	add := func(name string, target ocispec.Descriptor, signs digest.Digest, blobs []digest.Digest) {
		if taken[name] {
			return
		}
		taken[name] = true
		out.wants = append(out.wants, runtime.Want{Name: name, Target: target, Signs: signs})
		out.names.Add(name, blobs)
	}
	for _, image := range slices.Sorted(maps.Keys(repos)) {
		var legacy, bundles []ocispec.Descriptor
		for _, m := range kept.byImage[image] {
			switch kept.kinds[m.Digest] {
			case layout.KindSimpleSigning:
				legacy = append(legacy, m)
			case layout.KindBundle:
				bundles = append(bundles, m)
			}
		}
		sort.Slice(legacy, func(i, j int) bool { return legacy[i].Digest < legacy[j].Digest })
		var index ocispec.Descriptor
		var indexBlobs []digest.Digest
		if len(bundles) > 0 {
			data, desc, err := oci.ReferrersIndex(bundles, docs)
			if err != nil {
				return signatureRecords{}, fmt.Errorf("the referrers index of %s: %w", image, err)
			}
			var names []string
			for _, r := range repos[image] {
				names = append(names, oci.ReferrersRecord(r, image))
			}
			committed, err := sink.WriteDoc(ctx, desc, data, names)
			if err != nil {
				return signatureRecords{}, fmt.Errorf("writing the referrers index of %s: %w", image, err)
			}
			if !committed {
				out.toLease = append(out.toLease, desc.Digest)
			}
			out.blobs = append(out.blobs, desc.Digest)
			index, indexBlobs = desc, []digest.Digest{desc.Digest}
			for _, b := range bundles {
				indexBlobs = append(indexBlobs, kept.closures[b.Digest]...)
			}
		}
		for _, r := range repos[image] {
			if m, ok := legacyFor(legacy, oci.SignatureRecord(r, image)); ok {
				add(oci.SignatureRecord(r, image), m, image, kept.closures[m.Digest])
			}
			if index.Digest != "" {
				add(oci.ReferrersRecord(r, image), index, image, indexBlobs)
			}
		}
	}
	return out, nil
}

// legacyFor is the simple-signing manifest the record name points at: the
// one the archive gave that name, else the first by digest; a plain
// descriptor, as a registry's record holds it.
func legacyFor(legacy []ocispec.Descriptor, name string) (ocispec.Descriptor, bool) {
	if len(legacy) == 0 {
		return ocispec.Descriptor{}, false
	}
	m := legacy[0]
	for _, d := range legacy {
		if d.Annotations[oci.AnnotationRefName] == name {
			m = d
			break
		}
	}
	return ocispec.Descriptor{MediaType: m.MediaType, Digest: m.Digest, Size: m.Size}, true
}

// signaturesNamed says whether a state names every image's signatures it
// keeps (a want that Signs each, or a name of the archive's own that the
// record would have): a state written before holdfast named them names
// none, and its source is imported again so that it does.
func signaturesNamed(st runtime.SourceState) bool {
	for image, sigs := range st.Signatures {
		if len(sigs) == 0 {
			continue
		}
		if !slices.ContainsFunc(st.Images, func(w runtime.Want) bool { return w.Signs == image || recordOf(w.Name) == image }) {
			return false
		}
	}
	return true
}

// recordOf is the image whose signatures name names as a record would
// (cosign's tag, the referrers tag), "" for another name.
func recordOf(name string) digest.Digest {
	if t, ok := oci.ParseCosignTag(name); ok {
		return t.Image
	}
	d, _ := oci.ParseReferrersRecord(name)
	return d
}

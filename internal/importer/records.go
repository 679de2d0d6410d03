package importer

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/archive"
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
// through sink. Each manifest a record names is its peer copy (peerCopies),
// which carries its small blobs; the state's signatures stay the manifests
// kept. A name wants gives an image already is left to it.
func recordSignatures(ctx context.Context, sink runtime.Sink, wants []runtime.Want, kept keptSignatures, r oci.Reader, docs map[digest.Digest][]byte) (signatureRecords, error) {
	out := signatureRecords{names: runtime.Names{}}
	copies := peerCopies{sink: sink, r: r, docs: docs, made: map[digest.Digest]peerCopy{}}
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
			listed, listedDocs := make([]ocispec.Descriptor, 0, len(bundles)), map[digest.Digest][]byte{}
			for _, b := range bundles {
				c, err := copies.of(ctx, b, &out)
				if err != nil {
					return signatureRecords{}, err
				}
				listed = append(listed, c.desc)
				if c.data != nil {
					listedDocs[c.desc.Digest] = c.data
				}
			}
			data, desc, err := oci.ReferrersIndex(listed, listedDocs)
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
				indexBlobs = append(indexBlobs, copies.made[b.Digest].desc.Digest)
				indexBlobs = append(indexBlobs, kept.closures[b.Digest]...)
			}
		}
		for _, r := range repos[image] {
			if m, ok := legacyFor(legacy, oci.SignatureRecord(r, image)); ok {
				c, err := copies.of(ctx, m, &out)
				if err != nil {
					return signatureRecords{}, err
				}
				add(oci.SignatureRecord(r, image), c.desc, image, append([]digest.Digest{c.desc.Digest}, kept.closures[m.Digest]...))
			}
			if index.Digest != "" {
				add(oci.ReferrersRecord(r, image), index, image, indexBlobs)
			}
		}
	}
	return out, nil
}

// peerCopies are the peer copies of the signature manifests an import's
// records name: the manifest with its config and layers carried in their
// descriptors' data (oci.InlineBlobs, the blobs read through r), so that a
// registry mirror between nodes that serves manifests but not blobs of
// every kind (spegel) gives a peer the whole signature; a pull writes a
// descriptor's data as the blob. Each is written once through sink.
type peerCopies struct {
	sink runtime.Sink
	r    oci.Reader
	docs map[digest.Digest][]byte
	made map[digest.Digest]peerCopy // by the digest of the manifest kept
}

// peerCopy is a peer copy's plain descriptor and bytes; the manifest kept
// itself (and its bytes, if the walk read them) where nothing of it is
// inlined.
type peerCopy struct {
	desc ocispec.Descriptor
	data []byte
}

// of is the peer copy of the signature manifest m, written through the
// sink the first time, and listed in out's blobs (on its lease if it was
// in the store already).
func (p *peerCopies) of(ctx context.Context, m ocispec.Descriptor, out *signatureRecords) (peerCopy, error) {
	if c, ok := p.made[m.Digest]; ok {
		return c, nil
	}
	c := peerCopy{desc: ocispec.Descriptor{MediaType: m.MediaType, Digest: m.Digest, Size: m.Size}, data: p.docs[m.Digest]}
	if c.data != nil {
		// One that cannot be copied, or has nothing to inline, is named
		// as it is: a peer finds it as a registry would serve it.
		data, desc, ok, err := oci.InlineBlobs(ctx, c.data, oci.MaxInlineManifest, p.r)
		if err == nil && ok {
			committed, err := p.sink.WriteDoc(ctx, desc, data, nil)
			if err != nil {
				return peerCopy{}, fmt.Errorf("writing the peer copy of signature %s: %w", m.Digest, err)
			}
			if !committed {
				out.toLease = append(out.toLease, desc.Digest)
			}
			out.blobs = append(out.blobs, desc.Digest)
			c = peerCopy{desc: desc, data: data}
		}
	}
	p.made[m.Digest] = c
	return c, nil
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
		if !slices.ContainsFunc(st.Images, func(w runtime.Want) bool { d, _ := oci.SignedBy(w.Name); return w.Signs == image || d == image }) {
			return false
		}
	}
	return true
}

// signatureReader reads the small blobs of the signatures an import keeps:
// from what the walk read whole, else from the store, no more than one
// byte past the size the descriptor gives (a blob of another size is the
// caller's to refuse).
func signatureReader(s runtime.Store, walked *archive.Result) oci.Reader {
	return oci.ReaderFunc(func(ctx context.Context, d ocispec.Descriptor) ([]byte, error) {
		if b, ok := walked.Docs[d.Digest]; ok {
			return b, nil
		}
		rc, err := s.OpenBlob(ctx, d)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(io.LimitReader(rc, max(d.Size, 0)+1))
	})
}

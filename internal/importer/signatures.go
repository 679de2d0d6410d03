package importer

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/archive"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/signature/layout"
)

// MediaTypeZarfYAML is the media type holdfast gives a Zarf package's
// zarf.yaml kept in the content store.
const MediaTypeZarfYAML = "application/vnd.zarf.package.v1+yaml"

// keptSignatures is what keepSignatures kept of an archive's signatures.
type keptSignatures struct {
	// byImage are the signature manifests by image target.
	byImage map[digest.Digest][]ocispec.Descriptor
	pkg     *runtime.PackageSignature
	// blobs are every blob of the signature manifests kept (each manifest,
	// its config, its layers), for the state's list of what the source
	// needs.
	blobs []digest.Digest
	// kinds are the kinds of the signature manifests kept (layout's
	// KindSimpleSigning, KindBundle), and closures the blobs kept of each
	// (the manifest, its config, its layers), by manifest digest.
	kinds    map[digest.Digest]string
	closures map[digest.Digest][]digest.Digest
}

// keepSignatures writes the signature manifests the walk found for its
// images with every blob each names (config and layers), and a Zarf
// package's signature and zarf.yaml, through k under the import's lease:
// small blobs, kept whatever the policy so that a policy set later judges
// them without the archive, and whole so that an export of the images carries them as
// they came. A blob of a signature manifest that is neither in the archive
// nor in the store (an archive written without it) is left out, and the
// signature is kept without it.
func keepSignatures(ctx context.Context, k *keeper, walked *archive.Result) (keptSignatures, error) {
	var out keptSignatures
	keep := func(desc ocispec.Descriptor, data []byte) (bool, error) { return k.keep(ctx, desc, data, "signature") }
	if p := walked.Package; p != nil {
		out.pkg = &runtime.PackageSignature{
			Manifest: ocispec.Descriptor{MediaType: MediaTypeZarfYAML, Digest: digest.FromBytes(p.Manifest), Size: int64(len(p.Manifest))},
			Bundle:   ocispec.Descriptor{MediaType: oci.MediaTypeSigstoreBundle, Digest: digest.FromBytes(p.Bundle), Size: int64(len(p.Bundle))},
		}
		for _, b := range []struct {
			desc ocispec.Descriptor
			data []byte
		}{{out.pkg.Manifest, p.Manifest}, {out.pkg.Bundle, p.Bundle}} {
			if _, err := keep(b.desc, b.data); err != nil {
				return keptSignatures{}, err
			}
		}
	}
	carried := layout.Carried(ctx, walked)
	if len(carried) == 0 {
		return out, nil
	}
	out.byImage = map[digest.Digest][]ocispec.Descriptor{}
	out.kinds, out.closures = map[digest.Digest]string{}, map[digest.Digest][]digest.Digest{}
	for target, sigs := range carried {
		for _, sig := range sigs {
			m := sig.Manifest
			if data, ok := walked.Docs[m.Digest]; ok {
				m.Size = int64(len(data))
			}
			// Children first: a manifest is written once what it names is.
			for _, c := range signatureChildren(walked.Docs[m.Digest], sig.Layer) {
				kept, err := keep(c, nil)
				if err != nil {
					return keptSignatures{}, err
				}
				if kept {
					out.note(m.Digest, sig.Kind, c.Digest)
				}
			}
			if _, err := keep(m, nil); err != nil {
				return keptSignatures{}, err
			}
			out.note(m.Digest, sig.Kind, m.Digest)
			if !slices.ContainsFunc(out.byImage[target], func(d ocispec.Descriptor) bool {
				return d.Digest == m.Digest && d.Annotations[oci.AnnotationRefName] == m.Annotations[oci.AnnotationRefName]
			}) {
				out.byImage[target] = append(out.byImage[target], m)
			}
		}
	}
	return out, nil
}

// note records that blob, the signature manifest m of kind or a blob it
// names, is kept.
func (k *keptSignatures) note(m digest.Digest, kind string, blob digest.Digest) {
	if !slices.Contains(k.blobs, blob) {
		k.blobs = append(k.blobs, blob)
	}
	if !slices.Contains(k.closures[m], blob) {
		k.closures[m] = append(k.closures[m], blob)
	}
	if k.kinds[m] == "" {
		k.kinds[m] = kind
	}
}

// signatureChildren are the blobs a signature manifest names: its config
// and its layers; the signature's own layer alone when the manifest cannot
// be parsed (the finder read it, so it can).
func signatureChildren(raw []byte, layer ocispec.Descriptor) []ocispec.Descriptor {
	var m ocispec.Manifest
	if raw == nil || json.Unmarshal(raw, &m) != nil {
		return []ocispec.Descriptor{layer}
	}
	out := []ocispec.Descriptor{m.Config}
	for _, l := range m.Layers {
		if !slices.ContainsFunc(out, func(d ocispec.Descriptor) bool { return d.Digest == l.Digest }) {
			out = append(out, l)
		}
	}
	return slices.DeleteFunc(out, func(d ocispec.Descriptor) bool { return d.Digest.Validate() != nil })
}

// signaturesListed says whether a state lists, among the blobs its source
// needs, each signature manifest it keeps: a state written before holdfast
// kept every blob of a signature manifest lists none, and its source is
// imported again so that it keeps them (its configs, until then left out).
func signaturesListed(st runtime.SourceState) bool {
	for _, sigs := range st.Signatures {
		for _, d := range sigs {
			if !slices.Contains(st.Blobs, d.Digest) {
				return false
			}
		}
	}
	return true
}

// signatureBlobs are the blobs of w's signature manifests (a pull found them
// in the registry) that the store holds: the manifests and their layers,
// for the list's lease. A signature that cannot be read is left out: the
// policy then finds it missing.
func signatureBlobs(ctx context.Context, s runtime.Store, w runtime.Want) []digest.Digest {
	var out []digest.Digest
	for _, sig := range w.Signatures {
		refs, err := oci.Closure(ctx, sig, s, s.Platform())
		if err != nil {
			continue
		}
		for _, ref := range refs {
			if ok, _ := s.Has(ctx, ref.Desc.Digest); ok {
				out = append(out, ref.Desc.Digest)
			}
		}
	}
	return out
}

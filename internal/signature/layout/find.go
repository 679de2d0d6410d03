// Package layout finds the cosign signatures of an image among what an
// import already holds (an archive's skipped entries, a content store's
// records and referrers) and reads them; it verifies nothing and imports no
// sigstore code, so that the import links none (package signature verifies).
//
// Two layouts are understood. The legacy one: a manifest tagged
// <repo>:sha256-<hex>.sig whose layers are simple-signing payloads, each
// signed in the layer's annotations. The cosign v3 one: an OCI 1.1 referrer
// whose subject is the image and whose single layer is a sigstore bundle
// holding a DSSE-signed in-toto statement about the image.
package layout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
)

// maxBlob bounds what NewIndex reads of a signature manifest or layer: payloads
// and bundles are a few KiB.
const maxBlob = 4 << 20

// Kinds of Signature.
const (
	KindSimpleSigning = "simplesigning" // a layer of a legacy .sig manifest
	KindBundle        = "bundle"        // the layer of a sigstore bundle referrer
	KindBlob          = "blob"          // a sigstore bundle over a file's bytes (cosign sign-blob, zarf.bundle.sig)
)

// Signature is one signature Index.Find found for an image: its content, checked
// against its digest, and where it came from. Nothing in it is verified.
type Signature struct {
	Kind     string
	Manifest ocispec.Descriptor // the signature manifest or referrer
	// Layer is the simple-signing layer, whose annotations hold the
	// signature, or the bundle layer.
	Layer   ocispec.Descriptor
	Content []byte // the payload, or the bundle JSON
	// Blob is what a KindBlob bundle signs.
	Blob []byte
}

// Index holds the signatures among an archive's candidates by the image
// each claims, so that finding those of one image reads nothing: NewIndex
// reads and parses each candidate manifest, and each simple-signing layer,
// once.
type Index struct {
	manifests []indexed
	// byImage lists the manifests that claim an image by their subject, or
	// the simple-signing layers whose payload names it, in candidate order.
	byImage map[digest.Digest][]claim
	// byTag lists the manifests without a subject named with a tag
	// (SigTag of the image they claim), in candidate order.
	byTag map[string][]claim
	// unknown lists the manifests that could not be read and have no
	// subject: they may be any image's.
	unknown []claim
}

// indexed is what NewIndex read of one candidate manifest: its signatures
// (every simple-signing layer of it, or its bundle), or why it could not be
// read.
type indexed struct {
	sigs []Signature
	err  error
}

// claim is a manifest of Index.manifests that may hold an image's
// signatures: all of them, or only its layer-th.
type claim struct {
	manifest int
	layer    int // -1 for every signature of the manifest
}

// NewIndex reads candidates and indexes the signatures among them by the
// image each claims (see Find). Candidates are manifests: the index entries
// an archive skipped as signatures or referrers, or records named
// <repo>:sha256-<hex>.sig. A candidate that cannot be read is kept with its
// error, which Find reports for the images it may claim.
func NewIndex(ctx context.Context, candidates []ocispec.Descriptor, b oci.Reader) *Index {
	x := &Index{byImage: map[digest.Digest][]claim{}, byTag: map[string][]claim{}}
	// A manifest may be among the candidates under several names.
	tags := map[digest.Digest][]string{}
	for _, c := range candidates {
		for _, t := range sigTags(c) {
			if !slices.Contains(tags[c.Digest], t) {
				tags[c.Digest] = append(tags[c.Digest], t)
			}
		}
	}
	seen := map[digest.Digest]bool{}
	for _, c := range candidates {
		if seen[c.Digest] || !isManifest(c.MediaType) {
			continue
		}
		seen[c.Digest] = true
		i := len(x.manifests)
		m, sigs, named, err := readCandidate(ctx, b, c)
		if err != nil {
			x.manifests = append(x.manifests, indexed{err: fmt.Errorf("manifest %s: %w", c.Digest, err)})
			if m != nil && m.Subject != nil {
				x.byImage[m.Subject.Digest] = append(x.byImage[m.Subject.Digest], claim{i, -1})
			} else {
				x.unknown = append(x.unknown, claim{i, -1})
			}
			continue
		}
		if len(sigs) == 0 {
			continue
		}
		x.manifests = append(x.manifests, indexed{sigs: sigs})
		if m.Subject != nil {
			x.byImage[m.Subject.Digest] = append(x.byImage[m.Subject.Digest], claim{i, -1})
			continue
		}
		for _, t := range tags[c.Digest] {
			x.byTag[t] = append(x.byTag[t], claim{i, -1})
		}
		for l, d := range named {
			if d != "" {
				x.byImage[d] = append(x.byImage[d], claim{i, l})
			}
		}
	}
	return x
}

// readCandidate reads a candidate manifest: its signatures, and for each the
// image its payload names ("" for a bundle, or a payload that names none).
// A blob that is no manifest (or whose mediaType says it is another thing),
// or a bundle referrer of an attestation, has no signatures. On error, m is
// the manifest when it could be read: with a subject, the error is only
// that image's.
func readCandidate(ctx context.Context, b oci.Reader, c ocispec.Descriptor) (m *ocispec.Manifest, sigs []Signature, named []digest.Digest, err error) {
	raw, err := read(ctx, b, c)
	if err != nil {
		return nil, nil, nil, err
	}
	m = &ocispec.Manifest{}
	if json.Unmarshal(raw, m) != nil || !isManifest(m.MediaType) {
		return nil, nil, nil, nil
	}
	if isBundleReferrer(*m) {
		if p, ok := m.Annotations[oci.AnnotationBundlePredicateType]; ok && p != oci.PredicateCosignSign {
			return m, nil, nil, nil
		}
		l := m.Layers[0]
		content, err := read(ctx, b, l)
		if err != nil {
			return m, nil, nil, err
		}
		return m, []Signature{{Kind: KindBundle, Manifest: c, Layer: l, Content: content}}, []digest.Digest{""}, nil
	}
	for _, l := range m.Layers {
		if l.MediaType != oci.MediaTypeSimpleSigning {
			continue
		}
		p, err := read(ctx, b, l)
		if err != nil {
			return m, nil, nil, err
		}
		sigs = append(sigs, Signature{Kind: KindSimpleSigning, Manifest: c, Layer: l, Content: p})
		named = append(named, claims(p))
	}
	return m, sigs, named, nil
}

// Find returns the signatures among the candidates that claim to be of
// image, and the errors of the candidates that could not be read and may
// have claimed it, each naming its manifest.
//
// A manifest whose subject is another image is that image's, and is left
// out. A bundle referrer of image is kept unless its annotations say it
// holds an attestation rather than a signature. A legacy simple-signing
// layer is kept when its payload names the image's digest, or when its
// manifest claims the image: by its subject, or by its candidate descriptor
// being named with oci.SignatureTag(image) (org.opencontainers.image.ref.name or
// io.containerd.image.name); Verify then judges it even if its payload names
// another image. Anything else (attestations, SBOMs, charts, images) is
// ignored. Nothing is verified here. A candidate that could not be read
// (an error of the Reader, or content that does not match its descriptor)
// gives none of its signatures: its error concerns the image of its
// subject, or, without one, every image. Signatures and errors come in the
// order of the candidates.
func (x *Index) Find(image ocispec.Descriptor) ([]Signature, []error) {
	var hits []claim
	hits = append(hits, x.byImage[image.Digest]...)
	hits = append(hits, x.byTag[oci.SignatureTag(image.Digest)]...)
	hits = append(hits, x.unknown...)
	slices.SortFunc(hits, func(a, b claim) int {
		if a.manifest != b.manifest {
			return a.manifest - b.manifest
		}
		return a.layer - b.layer
	})
	var sigs []Signature
	var errs []error
	for i := 0; i < len(hits); {
		c := hits[i]
		m := x.manifests[c.manifest]
		j := i
		for j < len(hits) && hits[j].manifest == c.manifest {
			j++
		}
		switch {
		case m.err != nil:
			errs = append(errs, m.err)
		case c.layer < 0: // the whole manifest (sorted first)
			sigs = append(sigs, m.sigs...)
		default: // layers whose payload names the image, each once
			for _, h := range hits[i:j] {
				sigs = append(sigs, m.sigs[h.layer])
			}
		}
		i = j
	}
	return sigs, errs
}

// sigTags are the tags d is named with. A name of d
// (org.opencontainers.image.ref.name or io.containerd.image.name) is named
// with a tag when it is the tag or ends with a colon and the tag: so each
// name whole, and each part of it after a colon, that ends with .sig. Find
// looks oci.SignatureTag(image) up among them.
func sigTags(d ocispec.Descriptor) []string {
	var out []string
	for _, k := range []string{oci.AnnotationRefName, oci.AnnotationImageName} {
		n := d.Annotations[k]
		for {
			if strings.HasSuffix(n, ".sig") && !slices.Contains(out, n) {
				out = append(out, n)
			}
			i := strings.Index(n, ":")
			if i < 0 {
				break
			}
			n = n[i+1:]
		}
	}
	return out
}

// isBundleReferrer says whether m is the manifest cosign v3 pushes for a
// sigstore bundle: a referrer with the bundle as its single layer.
func isBundleReferrer(m ocispec.Manifest) bool {
	return m.Subject != nil && len(m.Layers) == 1 && m.Layers[0].MediaType == oci.MediaTypeSigstoreBundle &&
		(m.ArtifactType == "" || m.ArtifactType == oci.MediaTypeSigstoreBundle)
}

// read reads a blob and checks it against its descriptor.
func read(ctx context.Context, b oci.Reader, d ocispec.Descriptor) ([]byte, error) {
	if err := d.Digest.Validate(); err != nil {
		return nil, fmt.Errorf("blob %q: %w", d.Digest, err)
	}
	if d.Size > maxBlob {
		return nil, fmt.Errorf("blob %s: %d bytes, more than a signature's %d", d.Digest, d.Size, maxBlob)
	}
	raw, err := b.ReadBlob(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	if got := d.Digest.Algorithm().FromBytes(raw); got != d.Digest {
		return nil, fmt.Errorf("blob %s: content has digest %s", d.Digest, got)
	}
	if d.Size > 0 && int64(len(raw)) != d.Size {
		return nil, fmt.Errorf("blob %s: %d bytes, its descriptor says %d", d.Digest, len(raw), d.Size)
	}
	if len(raw) > maxBlob {
		return nil, fmt.Errorf("blob %s: %d bytes, more than a signature's %d", d.Digest, len(raw), maxBlob)
	}
	return raw, nil
}

// isManifest says whether a candidate may be a signature manifest: an OCI
// or Docker manifest (cosign writes the Docker type with
// COSIGN_DOCKER_MEDIA_TYPES set), or a descriptor that does not say.
func isManifest(mediaType string) bool {
	return mediaType == "" || oci.IsManifest(mediaType)
}

// simpleSigning is what holdfast reads of a cosign simple-signing payload.
type simpleSigning struct {
	Critical struct {
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
}

// payloadType is the critical.type of a cosign image signature.
const payloadType = "cosign container image signature"

// PayloadImage is the image digest a simple-signing payload names
// (critical.image.docker-manifest-digest), as written; an error when the
// payload is no cosign container image signature.
func PayloadImage(payload []byte) (string, error) {
	p, err := parsePayload(payload)
	if err != nil {
		return "", err
	}
	return p.Critical.Image.DockerManifestDigest, nil
}

// parsePayload reads a simple-signing payload.
func parsePayload(payload []byte) (simpleSigning, error) {
	var p simpleSigning
	if err := json.Unmarshal(payload, &p); err != nil {
		return p, fmt.Errorf("payload: %w", err)
	}
	if p.Critical.Type != payloadType {
		return p, errors.New("payload: not a cosign container image signature")
	}
	return p, nil
}

// claims is the image digest a simple-signing payload names, unverified;
// "" when it names none.
func claims(payload []byte) digest.Digest {
	p, err := parsePayload(payload)
	if err != nil {
		return ""
	}
	return digest.Digest(p.Critical.Image.DockerManifestDigest)
}

// Package signature finds the cosign signatures of an image among what an
// import already holds, and verifies them offline with sigstore-go.
//
// Two layouts are understood. The legacy one: a manifest tagged
// <repo>:sha256-<hex>.sig whose layers are simple-signing payloads, each
// signed in the layer's annotations. The cosign v3 one: an OCI 1.1 referrer
// whose subject is the image and whose single layer is a sigstore bundle
// holding a DSSE-signed in-toto statement about the image.
package signature

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Media types and annotations of cosign signatures.
const (
	MediaTypeSimpleSigning = "application/vnd.dev.cosign.simplesigning.v1+json"
	MediaTypeBundle        = "application/vnd.dev.sigstore.bundle.v0.3+json"

	AnnotationSignature   = "dev.cosignproject.cosign/signature"
	AnnotationCertificate = "dev.sigstore.cosign/certificate"
	AnnotationChain       = "dev.sigstore.cosign/chain"
	AnnotationRekorBundle = "dev.sigstore.cosign/bundle"
	AnnotationTimestamp   = "dev.sigstore.cosign/rfc3161timestamp"

	// annotationPredicateType is what a bundle referrer says its statement
	// is; cosign sign writes predicateSign, cosign attest anything else.
	annotationPredicateType = "dev.sigstore.bundle.predicateType"
	predicateSign           = "https://sigstore.dev/cosign/sign/v1"

	annotationContainerdName = "io.containerd.image.name"

	// cosign writes this instead of the OCI type with
	// COSIGN_DOCKER_MEDIA_TYPES set.
	mediaTypeDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
)

// maxBlob bounds what Find reads of a signature manifest or layer: payloads
// and bundles are a few KiB.
const maxBlob = 4 << 20

// Kinds of Signature.
const (
	KindSimpleSigning = "simplesigning" // a layer of a legacy .sig manifest
	KindBundle        = "bundle"        // the layer of a sigstore bundle referrer
	KindBlob          = "blob"          // a sigstore bundle over a file's bytes (cosign sign-blob, zarf.bundle.sig)
)

// Blobs reads small blobs (manifests, signature layers, bundles) by
// descriptor, wherever the import keeps them.
type Blobs interface {
	Read(ctx context.Context, desc ocispec.Descriptor) ([]byte, error)
}

// Signature is one signature Find found for an image: its content, checked
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

// SigTag is the tag cosign gives the signatures of the image with this
// digest: sha256-<hex>.sig.
func SigTag(image digest.Digest) string {
	return image.Algorithm().String() + "-" + image.Encoded() + ".sig"
}

// Find returns the signatures among candidates that claim to be of image.
// Candidates are manifests: the index entries an archive skipped as
// signatures or referrers, or records named <repo>:sha256-<hex>.sig.
//
// A manifest whose subject is another image is that image's, and is left
// out. A bundle referrer of image is kept unless its annotations say it
// holds an attestation rather than a signature. A legacy simple-signing
// layer is kept when its payload names the image's digest, or when its
// manifest claims the image: by its subject, or by its candidate descriptor
// being named with SigTag(image) (org.opencontainers.image.ref.name or
// io.containerd.image.name); Verify then judges it even if its payload names
// another image. Anything else (attestations, SBOMs, charts, images) is
// ignored. Nothing is verified here. Errors are those of b, and of content
// that does not match its descriptor.
func Find(ctx context.Context, image ocispec.Descriptor, candidates []ocispec.Descriptor, b Blobs) ([]Signature, error) {
	var out []Signature
	tagged := map[digest.Digest]bool{} // a manifest may be among the candidates under several names
	for _, c := range candidates {
		if named(c, SigTag(image.Digest)) {
			tagged[c.Digest] = true
		}
	}
	seen := map[digest.Digest]bool{}
	for _, c := range candidates {
		if seen[c.Digest] || !isManifest(c.MediaType) {
			continue
		}
		seen[c.Digest] = true
		raw, err := read(ctx, b, c)
		if err != nil {
			return nil, err
		}
		var m ocispec.Manifest
		if json.Unmarshal(raw, &m) != nil || !isManifest(m.MediaType) {
			continue
		}
		if m.Subject != nil && m.Subject.Digest != image.Digest {
			continue
		}
		if isBundleReferrer(m) {
			if p, ok := m.Annotations[annotationPredicateType]; ok && p != predicateSign {
				continue
			}
			l := m.Layers[0]
			content, err := read(ctx, b, l)
			if err != nil {
				return nil, err
			}
			out = append(out, Signature{Kind: KindBundle, Manifest: c, Layer: l, Content: content})
			continue
		}
		claimed := m.Subject != nil || tagged[c.Digest]
		for _, l := range m.Layers {
			if l.MediaType != MediaTypeSimpleSigning {
				continue
			}
			p, err := read(ctx, b, l)
			if err != nil {
				return nil, err
			}
			if claimed || claims(p) == image.Digest {
				out = append(out, Signature{Kind: KindSimpleSigning, Manifest: c, Layer: l, Content: p})
			}
		}
	}
	return out, nil
}

// isBundleReferrer says whether m is the manifest cosign v3 pushes for a
// sigstore bundle: a referrer with the bundle as its single layer.
func isBundleReferrer(m ocispec.Manifest) bool {
	return m.Subject != nil && len(m.Layers) == 1 && m.Layers[0].MediaType == MediaTypeBundle &&
		(m.ArtifactType == "" || m.ArtifactType == MediaTypeBundle)
}

// read reads a blob and checks it against its descriptor.
func read(ctx context.Context, b Blobs, d ocispec.Descriptor) ([]byte, error) {
	if err := d.Digest.Validate(); err != nil {
		return nil, fmt.Errorf("blob %q: %w", d.Digest, err)
	}
	if d.Size > maxBlob {
		return nil, fmt.Errorf("blob %s: %d bytes, more than a signature's %d", d.Digest, d.Size, maxBlob)
	}
	raw, err := b.Read(ctx, d)
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
// or Docker manifest, or a descriptor that does not say.
func isManifest(mediaType string) bool {
	return mediaType == "" || mediaType == ocispec.MediaTypeImageManifest || mediaType == mediaTypeDockerManifest
}

// named says whether a descriptor is named with tag.
func named(d ocispec.Descriptor, tag string) bool {
	for _, k := range []string{ocispec.AnnotationRefName, annotationContainerdName} {
		if n := d.Annotations[k]; n == tag || strings.HasSuffix(n, ":"+tag) {
			return true
		}
	}
	return false
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

package oci

import (
	"cmp"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Repository is an image name without its tag or digest.
func Repository(name string) string {
	if i := strings.IndexByte(name, '@'); i >= 0 {
		return name[:i]
	}
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		return name[:i]
	}
	return name
}

// SignatureRecord is the name under which a registry holds the cosign
// signature manifest of the image with this digest in repo:
// <repo>:sha256-<hex>.sig.
func SignatureRecord(repo string, image digest.Digest) string {
	return repo + ":" + SignatureTag(image)
}

// ReferrersRecord is the name under which a registry without the referrers
// API lists the referrers of the image with this digest in repo:
// <repo>:sha256-<hex>.
func ReferrersRecord(repo string, image digest.Digest) string {
	return repo + ":" + ReferrersTag(image)
}

// SignedBy says whether name is one a registry gives what it holds beside
// an image (cosign's sha256-<hex>.sig, .att, .sbom tags, or the referrers
// tag sha256-<hex>), and the image's digest ("" when a cosign tag's hex is
// no digest): such a name is never an image.
func SignedBy(name string) (digest.Digest, bool) {
	if t, ok := ParseCosignTag(name); ok {
		return t.Image, true
	}
	return ParseReferrersRecord(name)
}

// ParseReferrersRecord says whether a name's tag is the referrers tag of an
// image (sha256-<hex>, the whole tag), and the image's digest.
func ParseReferrersRecord(name string) (digest.Digest, bool) {
	i := strings.LastIndexByte(name, ':')
	if i < 0 || strings.ContainsAny(name[i:], "/@") {
		return "", false
	}
	alg, hex, ok := strings.Cut(name[i+1:], "-")
	if !ok {
		return "", false
	}
	d := digest.NewDigestFromEncoded(digest.Algorithm(alg), hex)
	if d.Validate() != nil {
		return "", false
	}
	return d, true
}

// ReferrersIndex is the referrers response of the OCI distribution spec
// for the referrer manifests given: an image index listing each once, by
// digest, with its media type, size, artifact type and annotations, as a
// registry answers GET /v2/<repo>/referrers/<digest> and as the fallback
// tag holds it. What each entry says is read from the manifest's bytes in
// docs; a manifest docs lacks (or that is no JSON) is listed as its
// descriptor says, without annotations. The bytes depend only on the
// manifests, not on their order.
func ReferrersIndex(manifests []ocispec.Descriptor, docs map[digest.Digest][]byte) ([]byte, ocispec.Descriptor, error) {
	byDigest := map[digest.Digest]referrer{}
	for _, d := range manifests {
		r := referrer{MediaType: cmp.Or(d.MediaType, ocispec.MediaTypeImageManifest), Digest: d.Digest, Size: d.Size, ArtifactType: d.ArtifactType}
		var m struct {
			MediaType    string              `json:"mediaType"`
			ArtifactType string              `json:"artifactType"`
			Config       *ocispec.Descriptor `json:"config"`
			Annotations  map[string]string   `json:"annotations"`
		}
		if data, ok := docs[d.Digest]; ok && json.Unmarshal(data, &m) == nil {
			r.MediaType, r.Size, r.Annotations = cmp.Or(m.MediaType, r.MediaType), int64(len(data)), m.Annotations
			r.ArtifactType = m.ArtifactType
			if r.ArtifactType == "" && m.Config != nil {
				// As the spec says a registry fills it in: the config's
				// media type when the manifest names no artifact type.
				r.ArtifactType = m.Config.MediaType
			}
		}
		byDigest[d.Digest] = r
	}
	idx := referrersIndex{SchemaVersion: 2, MediaType: ocispec.MediaTypeImageIndex, Manifests: []referrer{}}
	for _, d := range slices.Sorted(maps.Keys(byDigest)) {
		idx.Manifests = append(idx.Manifests, byDigest[d])
	}
	data, err := json.Marshal(idx)
	if err != nil {
		return nil, ocispec.Descriptor{}, err
	}
	return data, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageIndex, Digest: digest.FromBytes(data), Size: int64(len(data))}, nil
}

// referrersIndex and referrer fix the field order of ReferrersIndex's
// bytes; encoding/json writes a map's keys sorted.
type referrersIndex struct {
	SchemaVersion int        `json:"schemaVersion"`
	MediaType     string     `json:"mediaType"`
	Manifests     []referrer `json:"manifests"`
}

type referrer struct {
	MediaType    string            `json:"mediaType"`
	Digest       digest.Digest     `json:"digest"`
	Size         int64             `json:"size"`
	ArtifactType string            `json:"artifactType,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
}

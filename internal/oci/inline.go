package oci

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// MaxInlineManifest bounds the bytes of a manifest InlineBlobs writes: well
// under the 64 KiB a pull takes of a signature manifest.
const MaxInlineManifest = 48 << 10

// InlineBlobs is a copy of the image manifest raw whose config and layers
// carry their content in their descriptor's data (OCI 1.1), so that a
// registry that serves the manifest but not blobs of every kind (spegel
// serves a small blob only if it looks like an index, a manifest or a
// config) still gives the whole of it: a pull writes a descriptor's data
// instead of fetching the blob. Every other field stays as raw has it. A
// blob is inlined, config first then the layers in order, if r gives
// bytes that match its descriptor's digest and size and the copy stays
// within max bytes; one that r lacks, that does not fit or that carries
// data already stays as it is. The copy's bytes depend only on raw and the
// blobs (its keys sorted). ok is false when nothing is inlined: the
// manifest then needs no copy, as a manifest of another media type than
// OCI's.
func InlineBlobs(ctx context.Context, raw []byte, max int, r Reader) (data []byte, desc ocispec.Descriptor, ok bool, err error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, ocispec.Descriptor{}, false, fmt.Errorf("a manifest that is no JSON object: %w", err)
	}
	var head struct {
		MediaType string `json:"mediaType"`
	}
	_ = json.Unmarshal(raw, &head) // an object: no error, or a mediaType of another type
	mediaType := cmp.Or(head.MediaType, ocispec.MediaTypeImageManifest)
	if mediaType != ocispec.MediaTypeImageManifest { // Docker's schema has no data
		return nil, ocispec.Descriptor{}, false, nil
	}
	var layers []json.RawMessage
	if l, has := top["layers"]; has && string(l) != "null" {
		if err := json.Unmarshal(l, &layers); err != nil {
			return nil, ocispec.Descriptor{}, false, fmt.Errorf("the manifest's layers: %w", err)
		}
	}
	base, err := json.Marshal(top)
	if err != nil {
		return nil, ocispec.Descriptor{}, false, err
	}
	in := inliner{r: r, left: max - len(base)}
	if c, has := top["config"]; has {
		if top["config"], err = in.inline(ctx, c); err != nil {
			return nil, ocispec.Descriptor{}, false, fmt.Errorf("the manifest's config: %w", err)
		}
	}
	for i, l := range layers {
		if layers[i], err = in.inline(ctx, l); err != nil {
			return nil, ocispec.Descriptor{}, false, fmt.Errorf("the manifest's layer %d: %w", i, err)
		}
	}
	if in.inlined == 0 {
		return nil, ocispec.Descriptor{}, false, nil
	}
	if layers != nil {
		if top["layers"], err = json.Marshal(layers); err != nil {
			return nil, ocispec.Descriptor{}, false, err
		}
	}
	if data, err = json.Marshal(top); err != nil {
		return nil, ocispec.Descriptor{}, false, err
	}
	if len(data) > max {
		return nil, ocispec.Descriptor{}, false, fmt.Errorf("the copy is %d bytes, more than %d", len(data), max)
	}
	return data, ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}, true, nil
}

// inliner inlines blobs into descriptors while left bytes allow.
type inliner struct {
	r       Reader
	left    int
	inlined int
}

// inline is the descriptor raw (a JSON object) with data set to its
// blob's bytes, or raw itself when the blob is not inlined (see
// InlineBlobs); an error only for a descriptor that is no JSON object.
func (in *inliner) inline(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	var d ocispec.Descriptor
	if _, has := fields["data"]; has || json.Unmarshal(raw, &d) != nil || d.Digest.Validate() != nil || d.Size <= 0 {
		return raw, nil
	}
	// Compact, as the copy holds it, to measure what data adds.
	plain, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	if in.left <= 0 || d.Size > int64(in.left) || base64.StdEncoding.EncodedLen(int(d.Size)) > in.left {
		return raw, nil // cannot fit: not read
	}
	blob, err := in.r.ReadBlob(ctx, d)
	if err != nil || int64(len(blob)) != d.Size || d.Digest.Algorithm().FromBytes(blob) != d.Digest {
		return raw, nil
	}
	if fields["data"], err = json.Marshal(blob); err != nil { // []byte: base64
		return nil, err
	}
	with, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	grow := len(with) - len(plain)
	if grow > in.left {
		return raw, nil
	}
	in.left -= grow
	in.inlined++
	return with, nil
}

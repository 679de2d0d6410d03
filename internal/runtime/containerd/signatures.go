package containerd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/semaphore"

	"github.com/holdfast-project/holdfast/internal/oci"
)

// Bounds of what a pull fetches of an image's signatures, which are a few
// KiB each: a registry that lists more, or bigger ones, costs no more than
// this.
const (
	maxSignatureReferrers = 16        // referrers of one image fetched (the legacy .sig not counted)
	maxReferrersList      = 512 << 10 // the referrers API's answer, or the fallback tag's index
	maxSignatureManifest  = 64 << 10  // each signature manifest
	maxSignatureBlob      = 256 << 10 // each of its config and layers
	maxSignatureBytes     = 4 << 20   // all of one image's signatures
)

// registry is where one pull fetches from: the resolver and the hosts
// (mirrors and peers first, with their credentials) of the pulled
// reference's repository.
type registry struct {
	resolver remotes.Resolver
	hosts    docker.RegistryHosts
	repo     reference.Named
	log      *slog.Logger
}

// fetchSignatures fetches, under the lease of ctx, the signatures the
// registry holds for the image with digest image: cosign's legacy
// <repo>:sha256-<hex>.sig manifest, and the referrers that may be
// signatures listed by the referrers API and by the fallback tag
// <repo>:sha256-<hex>, each manifest with its config and layers, with the
// labels containerd's fetch gives them. What is not there is the common
// case and costs a 404 each; what cannot be fetched is logged at debug
// level and left out: the signature policy then judges without it.
func (r *Runtime) fetchSignatures(ctx context.Context, reg registry, image digest.Digest) []ocispec.Descriptor {
	budget := &signatureBudget{left: maxSignatureBytes}
	var out []ocispec.Descriptor
	sigRef := reg.repo.Name() + ":" + oci.SignatureTag(image)
	if _, desc, err := reg.resolver.Resolve(ctx, sigRef); err == nil {
		if err := r.fetchSignature(ctx, reg, sigRef, desc, "", budget); err != nil {
			reg.log.Debug("signature not fetched", "ref", sigRef, "err", err)
		} else {
			desc.Annotations = map[string]string{oci.AnnotationRefName: sigRef}
			out = append(out, desc)
		}
	} else if !errdefs.IsNotFound(err) {
		reg.log.Debug("signature not fetched", "ref", sigRef, "err", err)
	}
	for _, d := range reg.signatureReferrers(ctx, image) {
		if len(out) > 0 && out[0].Digest == d.Digest {
			continue // the .sig manifest, listed as a referrer too
		}
		ref := reg.repo.Name() + "@" + d.Digest.String()
		if err := r.fetchSignature(ctx, reg, ref, d, image, budget); err != nil {
			reg.log.Debug("signature referrer not fetched", "ref", ref, "err", err)
			continue
		}
		out = append(out, d)
	}
	return out
}

// signatureReferrers lists the referrers of image that may be signatures,
// from the referrers API and from the fallback tag, those whose artifact
// type says so first, then those whose list entry says nothing of it, at
// most maxSignatureReferrers, each once.
func (reg registry) signatureReferrers(ctx context.Context, image digest.Digest) []ocispec.Descriptor {
	listed, err := reg.referrersAPI(ctx, image)
	if err != nil {
		reg.log.Debug("referrers API answer not taken", "repo", reg.repo.Name(), "image", image, "err", err)
	}
	tagged, err := reg.referrersTag(ctx, image)
	if err != nil {
		reg.log.Debug("referrers tag not taken", "repo", reg.repo.Name(), "image", image, "err", err)
	}
	var signatures, unsaid []ocispec.Descriptor
	seen := map[digest.Digest]bool{}
	for _, d := range append(listed, tagged...) {
		if seen[d.Digest] || d.Digest.Validate() != nil {
			continue
		}
		seen[d.Digest] = true
		switch oci.ReferrerKind(d) {
		case oci.ReferrerSignature:
			signatures = append(signatures, d)
		case oci.ReferrerUnsaid:
			unsaid = append(unsaid, d)
		}
	}
	all := append(signatures, unsaid...)
	if len(all) > maxSignatureReferrers {
		reg.log.Debug("referrers left out", "repo", reg.repo.Name(), "image", image, "listed", len(all), "fetched", maxSignatureReferrers)
		all = all[:maxSignatureReferrers]
	}
	return all
}

// referrersTag reads the index a registry without the referrers API keeps
// under the fallback tag <repo>:sha256-<hex>, through the resolver's hosts
// in order: none is no error.
func (reg registry) referrersTag(ctx context.Context, image digest.Digest) ([]ocispec.Descriptor, error) {
	ref := reg.repo.Name() + ":" + oci.ReferrersTag(image)
	_, desc, err := reg.resolver.Resolve(ctx, ref)
	if errdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !oci.IsIndex(desc.MediaType) {
		return nil, fmt.Errorf("%s is a %s, not an index", ref, desc.MediaType)
	}
	if desc.Size > maxReferrersList || desc.Size < 0 {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d a referrers list may have", ref, desc.Size, maxReferrersList)
	}
	fetcher, err := reg.resolver.Fetcher(ctx, ref)
	if err != nil {
		return nil, err
	}
	rc, err := fetcher.Fetch(ctx, desc)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, desc.Size+1))
	if err != nil {
		return nil, err
	}
	if desc.Digest.Validate() != nil || int64(len(data)) != desc.Size || desc.Digest.Algorithm().FromBytes(data) != desc.Digest {
		return nil, fmt.Errorf("%s: the index read is not %s", ref, desc.Digest)
	}
	return decodeReferrers(data)
}

// decodeReferrers reads a referrers list: an OCI index.
func decodeReferrers(data []byte) ([]ocispec.Descriptor, error) {
	var idx ocispec.Index
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("a referrers list that is no index: %w", err)
	}
	return idx.Manifests, nil
}

// signatureBudget is what is left of maxSignatureBytes for one image's
// signatures; a fetch's handlers take from it at once.
type signatureBudget struct {
	mu   sync.Mutex
	left int64
}

func (b *signatureBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.left {
		return false
	}
	b.left -= n
	return true
}

// fetchSignature fetches the signature manifest desc of ref, its config and
// its layers into the content store, each within its bound and all within
// budget. A referrer of subject (not "") must name it as its subject and
// say by its artifact type that it is a signature, or nothing of it beyond
// its manifest is fetched.
func (r *Runtime) fetchSignature(ctx context.Context, reg registry, ref string, desc ocispec.Descriptor, subject digest.Digest, budget *signatureBudget) error {
	if !oci.IsManifest(desc.MediaType) {
		return fmt.Errorf("%s is a %s, not a manifest", desc.Digest, desc.MediaType)
	}
	fetcher, err := reg.resolver.Fetcher(ctx, ref)
	if err != nil {
		return err
	}
	cs := r.client.ContentStore()
	source, err := docker.AppendDistributionSourceLabel(cs, ref)
	if err != nil {
		return err
	}
	bounded := func(ctx context.Context, d ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		limit := int64(maxSignatureBlob)
		if d.Digest == desc.Digest {
			limit = maxSignatureManifest
		} else if oci.IsDoc(d.MediaType) {
			return nil, fmt.Errorf("%s names %s %s: a signature names no other manifest", desc.Digest, oci.Kind(d.MediaType), d.Digest)
		}
		if d.Size < 0 || d.Size > limit {
			return nil, fmt.Errorf("%s %s is %d bytes, more than the %d a signature's may have", oci.Kind(d.MediaType), d.Digest, d.Size, limit)
		}
		if !budget.take(d.Size) {
			return nil, fmt.Errorf("%s %s: the image's signatures are more than %d bytes", oci.Kind(d.MediaType), d.Digest, maxSignatureBytes)
		}
		return nil, nil
	}
	claims := func(ctx context.Context, d ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		if subject == "" || d.Digest != desc.Digest {
			return nil, nil
		}
		return nil, claimsSignature(ctx, cs, d, subject)
	}
	handler := images.Handlers(images.HandlerFunc(bounded), remotes.FetchHandler(cs, fetcher), images.HandlerFunc(claims),
		images.SetChildrenMappedLabels(cs, images.ChildrenHandler(cs), nil), source)
	return images.Dispatch(ctx, handler, semaphore.NewWeighted(4), desc)
}

// claimsSignature reads the referrer manifest d from the store and says
// why it is no signature of subject, or nil.
func claimsSignature(ctx context.Context, cs content.Provider, d ocispec.Descriptor, subject digest.Digest) error {
	raw, err := content.ReadBlob(ctx, cs, d)
	if err != nil {
		return err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("referrer %s: %w", d.Digest, err)
	}
	if m.Subject == nil || m.Subject.Digest != subject {
		return fmt.Errorf("referrer %s does not name %s as its subject", d.Digest, subject)
	}
	if !oci.IsSignatureArtifact(oci.ArtifactType(m), m.Annotations) {
		return fmt.Errorf("referrer %s is a %s, no signature", d.Digest, oci.ArtifactType(m))
	}
	return nil
}

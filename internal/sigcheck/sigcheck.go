// Package sigcheck judges the images an archive names against the signature
// policy: for each, the rule that applies (package policy), the cosign
// signatures the archive carries for it, and whether one verifies under the
// rule's trust (package signature).
package sigcheck

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/archive"
	"github.com/holdfast-project/holdfast/internal/policy"
	"github.com/holdfast-project/holdfast/internal/signature"
)

// Image is the verdict on one name an archive gives an image.
type Image struct {
	Name   string
	Target ocispec.Descriptor
	policy.Verdict
}

// Check judges each image res names against pol, reading signatures with b
// (Docs(res), or a store that holds more). Names that are cosign's tags of
// signatures, attestations and SBOMs (<repo>:sha256-<hex>.sig, .att, .sbom)
// are no images to judge: their manifests are candidate signatures, as are
// the index entries the walk skipped. An image no rule matches is unchecked,
// and its signatures are not looked for; each target is verified once per
// rule, whatever number of names it has.
func Check(ctx context.Context, pol *policy.Policy, res *archive.Result, b signature.Blobs) []Image {
	find := finder(ctx, Candidates(res), b)
	type key struct {
		target digest.Digest
		rule   *policy.Rule
	}
	found := map[digest.Digest]found{}
	verdicts := map[key]policy.Verdict{}
	var out []Image
	for _, img := range res.Images {
		if _, tag := archive.CosignTag(img.Name); tag {
			continue
		}
		rule, ok := pol.RuleFor(img.Name)
		if !ok {
			out = append(out, Image{Name: img.Name, Target: img.Target, Verdict: policy.Verdict{State: policy.Unchecked, Reason: "no rule matches"}})
			continue
		}
		k := key{img.Target.Digest, rule}
		v, ok := verdicts[k]
		if !ok {
			f, ok := found[img.Target.Digest]
			if !ok {
				f = find(img.Target)
				if res.Package != nil {
					f.packages = append(f.packages, *res.Package)
				}
				found[img.Target.Digest] = f
			}
			v = judge(ctx, pol, rule, img.Target, f)
			verdicts[k] = v
		}
		out = append(out, Image{Name: img.Name, Target: img.Target, Verdict: v})
	}
	return judgedByImage(out)
}

// judgedByImage gives each image the verdict of its image over all the
// names imgs give it (byImage).
func judgedByImage(imgs []Image) []Image {
	names := map[digest.Digest][]string{}
	own := map[digest.Digest]map[string]policy.Verdict{}
	for _, img := range imgs {
		d := img.Target.Digest
		if own[d] == nil {
			own[d] = map[string]policy.Verdict{}
		}
		names[d] = append(names[d], img.Name)
		own[d][img.Name] = img.Verdict
	}
	judged := map[digest.Digest]map[string]policy.Verdict{}
	for d, ns := range names {
		judged[d] = byImage(ns, func(n string) policy.Verdict { return own[d][n] })
	}
	for i := range imgs {
		imgs[i].Verdict = judged[imgs[i].Target.Digest][imgs[i].Name]
	}
	return imgs
}

// Candidates are the manifests of res that may be signatures: the index
// entries the walk skipped (signatures, referrers, and the rest, which
// signature.NewIndex passes over), named with the name each carried (so
// that a <repo>:sha256-<hex>.sig name claims its image), and the images
// named with a cosign tag.
func Candidates(res *archive.Result) []ocispec.Descriptor {
	var out []ocispec.Descriptor
	for _, s := range res.Skipped {
		d := ocispec.Descriptor{MediaType: s.MediaType, Digest: s.Digest, Size: s.Size}
		if s.Name != "" {
			d.Annotations = map[string]string{ocispec.AnnotationRefName: s.Name}
		}
		out = append(out, d)
	}
	for _, img := range res.Images {
		if _, tag := archive.CosignTag(img.Name); tag {
			d := img.Target
			d.Annotations = map[string]string{ocispec.AnnotationRefName: img.Name}
			out = append(out, d)
		}
	}
	return out
}

// found is what was found of one image's signatures: the signatures, the
// signatures of the Zarf packages that hold it, and the candidates that
// could not be read.
type found struct {
	sigs       []signature.Signature
	packages   []archive.PackageSignature
	unreadable []error
}

// finder returns a function that finds the signatures of an image among
// candidates. Its first call reads every candidate, once
// (signature.NewIndex); one that cannot be read leaves the others found,
// and is unreadable for the images it may claim.
func finder(ctx context.Context, candidates []ocispec.Descriptor, b signature.Blobs) func(target ocispec.Descriptor) found {
	index := sync.OnceValue(func() *signature.Index { return signature.NewIndex(ctx, candidates, b) })
	return func(target ocispec.Descriptor) found {
		sigs, unreadable := index().Find(target)
		return found{sigs: sigs, unreadable: unreadable}
	}
}

// judge is the verdict of rule on target, whose signatures are f.
func judge(ctx context.Context, pol *policy.Policy, rule *policy.Rule, target ocispec.Descriptor, f found) policy.Verdict {
	ruleAt := fmt.Sprintf("rule %s:%d", pol.Path, rule.Line)
	unreadable := ""
	if n := len(f.unreadable); n == 1 {
		unreadable = fmt.Sprintf("a candidate signature cannot be read: %v", f.unreadable[0])
	} else if n > 1 {
		unreadable = fmt.Sprintf("%d candidate signatures cannot be read, the first: %v", n, f.unreadable[0])
	}
	v := imageVerdict(ctx, rule, ruleAt, target, f, unreadable)
	if v.State == policy.Verified {
		return v
	}
	// A Zarf package's signature vouches for every image it holds: its
	// zarf.yaml's checksums cover them (checked at import).
	for _, p := range f.packages {
		r := signature.VerifyBlob(ctx, p.Bundle, p.Manifest, Trust(rule))
		if r.State == signature.Verified {
			return policy.Verdict{State: policy.Verified, By: r.By, Reason: ruleAt + ": the Zarf package's signature (zarf.bundle.sig over zarf.yaml)"}
		}
		v.Reason += "; nor does the Zarf package's signature verify: " + r.Reason
	}
	return v
}

// imageVerdict is the verdict of rule on target by its own signatures.
func imageVerdict(ctx context.Context, rule *policy.Rule, ruleAt string, target ocispec.Descriptor, f found, unreadable string) policy.Verdict {
	if len(f.sigs) == 0 && unreadable != "" {
		return policy.Verdict{State: policy.Invalid, Reason: ruleAt + ": " + unreadable}
	}
	r := signature.Verify(ctx, target, f.sigs, Trust(rule))
	v := policy.Verdict{By: r.By, Reason: ruleAt}
	switch r.State {
	case signature.Verified:
		v.State = policy.Verified
		return v
	case signature.Unsigned:
		v.State = policy.Unsigned
	default:
		v.State = policy.Invalid
	}
	if r.Reason != "" {
		v.Reason += ": " + r.Reason
	}
	if unreadable != "" {
		v.Reason += "; and " + unreadable
	}
	return v
}

// Trust is what rule trusts, for signature.Verify: its keys, named by their
// files, and its keyless trusted root and identities.
func Trust(rule *policy.Rule) signature.Trust {
	var t signature.Trust
	for _, k := range rule.Keys {
		t.Keys = append(t.Keys, signature.Key{Name: k.Path, Public: k.Public})
	}
	if kl := rule.Keyless; kl != nil {
		t.TrustedRoot = kl.TrustedRootJSON
		for _, id := range kl.Identities {
			t.Identities = append(t.Identities, signature.Identity{
				Issuer: id.Issuer, IssuerRegExp: id.IssuerRegExp,
				Subject: id.Subject, SubjectRegExp: id.SubjectRegExp,
			})
		}
	}
	return t
}

// Docs reads blobs from what a walk kept of them: its documents (manifests,
// configs, and small JSON blobs such as simple-signing payloads and sigstore
// bundles). Any other blob cannot be read: the error says why.
func Docs(res *archive.Result) signature.Blobs { return docs{res} }

type docs struct{ res *archive.Result }

func (d docs) Read(_ context.Context, desc ocispec.Descriptor) ([]byte, error) {
	if b, ok := d.res.Docs[desc.Digest]; ok {
		return b, nil
	}
	if _, ok := d.res.Blobs[desc.Digest]; ok {
		return nil, errors.New("in the archive, but not a small JSON document, which is all a check keeps of it")
	}
	return nil, errors.New("not in the archive")
}

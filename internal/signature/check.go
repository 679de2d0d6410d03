package signature

import (
	"context"
	"fmt"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/archive"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/signature/layout"
)

// Image is the verdict on one name an archive gives an image.
type Image struct {
	Name   string
	Target ocispec.Descriptor
	Verdict
}

// Check judges each image res names against pol, reading signatures with b
// (layout.Docs(res), or a store that holds more). Names that are cosign's
// tags of signatures, attestations and SBOMs (<repo>:sha256-<hex>.sig, .att,
// .sbom) are no images to judge: their manifests are candidate signatures,
// as are the index entries the walk skipped. An image no rule matches is
// unchecked, and its signatures are not looked for; each target is verified
// once per rule, whatever number of names it has.
func Check(ctx context.Context, pol *Policy, res *archive.Result, b oci.Reader) []Image {
	finder := layout.NewFinder(ctx, layout.Candidates(res), b)
	type key struct {
		target digest.Digest
		rule   *Rule
	}
	seen := map[digest.Digest]found{}
	verdicts := map[key]Verdict{}
	var out []Image
	for _, img := range res.Images {
		if _, tag := oci.ParseCosignTag(img.Name); tag {
			continue
		}
		rule, ok := pol.RuleFor(img.Name)
		if !ok {
			out = append(out, Image{Name: img.Name, Target: img.Target, Verdict: noRule})
			continue
		}
		k := key{img.Target.Digest, rule}
		v, ok := verdicts[k]
		if !ok {
			f, ok := seen[img.Target.Digest]
			if !ok {
				f.sigs, f.unreadable = finder.Find(img.Target)
				if res.Package != nil {
					f.packages = append(f.packages, *res.Package)
				}
				seen[img.Target.Digest] = f
			}
			v = judge(ctx, pol, rule, img.Target, f)
			verdicts[k] = v
		}
		out = append(out, Image{Name: img.Name, Target: img.Target, Verdict: v})
	}
	return judgedByImage(out)
}

// noRule is the verdict on an image no rule matches.
var noRule = Verdict{State: Unchecked, Reason: "no rule matches"}

// judgedByImage gives each image the verdict of its image over all the
// names imgs give it (byImage).
func judgedByImage(imgs []Image) []Image {
	names := map[digest.Digest][]string{}
	own := map[digest.Digest]map[string]Verdict{}
	for _, img := range imgs {
		d := img.Target.Digest
		if own[d] == nil {
			own[d] = map[string]Verdict{}
		}
		names[d] = append(names[d], img.Name)
		own[d][img.Name] = img.Verdict
	}
	judged := map[digest.Digest]map[string]Verdict{}
	for d, ns := range names {
		judged[d] = byImage(ns, func(n string) Verdict { return own[d][n] })
	}
	for i := range imgs {
		imgs[i].Verdict = judged[imgs[i].Target.Digest][imgs[i].Name]
	}
	return imgs
}

// found is what was found of one image's signatures: the signatures, the
// signatures of the Zarf packages that hold it, and the candidates that
// could not be read.
type found struct {
	sigs       []layout.Signature
	packages   []archive.PackageSignature
	unreadable []error
}

// judge is the verdict of rule on target, whose signatures are f.
func judge(ctx context.Context, pol *Policy, rule *Rule, target ocispec.Descriptor, f found) Verdict {
	ruleAt := fmt.Sprintf("rule %s:%d", pol.Path, rule.Line)
	unreadable := ""
	if n := len(f.unreadable); n == 1 {
		unreadable = fmt.Sprintf("a candidate signature cannot be read: %v", f.unreadable[0])
	} else if n > 1 {
		unreadable = fmt.Sprintf("%d candidate signatures cannot be read, the first: %v", n, f.unreadable[0])
	}
	v := imageVerdict(ctx, rule, ruleAt, target, f, unreadable)
	if v.State == Verified {
		return v
	}
	// A Zarf package's signature vouches for every image it holds: its
	// zarf.yaml's checksums cover them (checked at import).
	for _, p := range f.packages {
		r := VerifyBlob(ctx, p.Bundle, p.Manifest, rule)
		if r.State == Verified {
			return Verdict{State: Verified, By: r.By, Reason: ruleAt + ": the Zarf package's signature (zarf.bundle.sig over zarf.yaml)"}
		}
		v.Reason += "; nor does the Zarf package's signature verify: " + r.Reason
	}
	return v
}

// imageVerdict is the verdict of rule on target by its own signatures.
func imageVerdict(ctx context.Context, rule *Rule, ruleAt string, target ocispec.Descriptor, f found, unreadable string) Verdict {
	if len(f.sigs) == 0 && unreadable != "" {
		return Verdict{State: Invalid, Reason: ruleAt + ": " + unreadable}
	}
	v := Verify(ctx, target, f.sigs, rule)
	why := v.Reason
	v.Reason = ruleAt
	if v.State == Verified {
		return v
	}
	if why != "" {
		v.Reason += ": " + why
	}
	if unreadable != "" {
		v.Reason += "; and " + unreadable
	}
	return v
}

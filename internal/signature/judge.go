package signature

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/archive"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/signature/layout"
)

// Judge judges the images sources want under Policy, by the signatures a
// content store keeps for them: those each source's state recorded
// (runtime.SourceState.Signatures), read with Blobs. It remembers its
// verdicts by image, by what the rule that applies says (its file, line,
// keys and keyless trust: a policy read again unchanged keeps them) and by
// the signatures, so that a pass verifies again only what changed. The zero
// Judge has no policy: it judges nothing.
type Judge struct {
	Policy *Policy // nil: no policy
	Blobs  oci.Reader

	mu   sync.Mutex
	memo map[memoKey]Verdict
}

type memoKey struct {
	target digest.Digest
	rule   string // ruleKey
	sigs   string
}

// Judgment is the verdicts of a Judge's policy on the images some source
// states want.
type Judgment struct {
	ctx        context.Context
	j          *Judge
	pol        *Policy
	byTarget   map[digest.Digest][]ocispec.Descriptor // candidate signatures
	packages   map[digest.Digest][]runtime.PackageSignature
	names      map[digest.Digest][]string           // every name the states give each image
	targets    map[digest.Digest]ocispec.Descriptor // each named image's target
	unrecorded map[digest.Digest]bool               // wanted by a state written before signatures were kept

	mu     sync.Mutex
	judged map[digest.Digest]map[string]Verdict
}

// For is the judgment of the policy on the images states want; nil
// without a policy. An image no rule matches is unchecked without a read.
func (j *Judge) For(ctx context.Context, states []runtime.SourceState) *Judgment {
	if j == nil || j.Policy == nil {
		return nil
	}
	g := &Judgment{ctx: ctx, j: j, pol: j.Policy,
		byTarget: map[digest.Digest][]ocispec.Descriptor{}, packages: map[digest.Digest][]runtime.PackageSignature{},
		names: map[digest.Digest][]string{}, targets: map[digest.Digest]ocispec.Descriptor{}, unrecorded: map[digest.Digest]bool{}, judged: map[digest.Digest]map[string]Verdict{}}
	wants := 0
	for _, st := range states {
		wants += len(st.Images)
		g.add(st)
	}
	// Verdicts of images no source wants any more go: the memo stays
	// within a few times what the sources want.
	j.mu.Lock()
	if j.memo == nil || len(j.memo) > 2*wants+64 {
		j.memo = map[memoKey]Verdict{}
	}
	j.mu.Unlock()
	return g
}

// add gathers what one source state says of its images' signatures.
func (g *Judgment) add(st runtime.SourceState) {
	for _, w := range st.Images {
		if w.Signs != "" {
			continue // a record of an image's signatures: no name of it
		}
		if _, tag := oci.ParseCosignTag(w.Name); !tag {
			g.names[w.Target.Digest] = append(g.names[w.Target.Digest], w.Name)
			g.targets[w.Target.Digest] = w.Target
		}
		if !st.SignaturesRecorded {
			g.unrecorded[w.Target.Digest] = true
		}
	}
	if p := st.Package; p != nil {
		for _, w := range st.Images {
			if !slices.ContainsFunc(g.packages[w.Target.Digest], func(o runtime.PackageSignature) bool {
				return o.Manifest.Digest == p.Manifest.Digest && o.Bundle.Digest == p.Bundle.Digest
			}) {
				g.packages[w.Target.Digest] = append(g.packages[w.Target.Digest], *p)
			}
		}
	}
	for t, ds := range st.Signatures {
		for _, d := range ds {
			if !slices.ContainsFunc(g.byTarget[t], func(o ocispec.Descriptor) bool { return sameCandidate(o, d) }) {
				g.byTarget[t] = append(g.byTarget[t], d)
			}
		}
	}
}

// Of is the verdict on the image target under name, judged over every
// name the states give it (byImage).
func (g *Judgment) Of(name string, target ocispec.Descriptor) Verdict {
	g.mu.Lock()
	v, ok := g.judged[target.Digest][name]
	g.mu.Unlock()
	if ok {
		return v
	}
	known := slices.Contains(g.names[target.Digest], name)
	vs := byImage(append(slices.Clone(g.names[target.Digest]), name), func(n string) Verdict { return g.own(n, target) })
	if known {
		g.mu.Lock()
		g.judged[target.Digest] = vs
		g.mu.Unlock()
	}
	return vs[name]
}

// Refuses says whether the policy refuses a want (Mode.Refuses of its
// verdict), and the verdict; a nil judgment, or one under warn, refuses
// nothing and judges nothing for it. A record of an image's signatures
// (Want.Signs) takes the verdict of the image it signs, under the image's
// name in the record's repository (any name of it, else): it is named only
// while the image is. One whose image no state names is refused.
func (g *Judgment) Refuses(w runtime.Want) (string, bool) {
	if g == nil || g.pol.Mode != Enforce {
		return "", false
	}
	if w.Signs != "" {
		names := g.names[w.Signs]
		if len(names) == 0 {
			return "no image " + w.Signs.String() + " is wanted", true
		}
		name := names[0]
		if i := slices.IndexFunc(names, func(n string) bool { return oci.Repository(n) == oci.Repository(w.Name) }); i >= 0 {
			name = names[i]
		}
		v := g.Of(name, g.targets[w.Signs])
		return v.String() + " (the image as " + name + ")", g.pol.Mode.Refuses(v)
	}
	v := g.Of(w.Name, w.Target)
	return v.String(), g.pol.Mode.Refuses(v)
}

// ImportedBeforeSignatures is the reason given for an image no signature
// verifies whose source was imported by a holdfast that did not keep the
// signatures it carried.
const ImportedBeforeSignatures = "imported before signatures were kept: release and import it again"

// own is the verdict on name alone, at target.
func (g *Judgment) own(name string, target ocispec.Descriptor) Verdict {
	v := g.j.verdict(g.ctx, g.pol, name, target, g.byTarget[target.Digest], g.packages[target.Digest])
	if v.State == Unsigned && g.unrecorded[target.Digest] {
		// Its source may well carry signatures: they were not kept.
		v.Reason = strings.TrimSuffix(v.Reason, ": no signature found") + ": " + ImportedBeforeSignatures
	}
	return v
}

// verdict is the verdict of pol on name alone, at target, whose candidate
// signatures and package signatures are given: remembered, or judged.
func (j *Judge) verdict(ctx context.Context, pol *Policy, name string, target ocispec.Descriptor, candidates []ocispec.Descriptor, pkgs []runtime.PackageSignature) Verdict {
	rule, ok := pol.RuleFor(name)
	if !ok {
		return noRule
	}
	k := memoKey{target: target.Digest, rule: ruleKey(pol, rule), sigs: candidateKey(candidates) + packageKey(pkgs)}
	j.mu.Lock()
	v, ok := j.memo[k]
	j.mu.Unlock()
	if ok {
		return v
	}
	var f found
	f.sigs, f.unreadable = layout.NewFinder(ctx, candidates, j.Blobs).Find(target)
	for _, p := range pkgs {
		m, merr := j.Blobs.ReadBlob(ctx, p.Manifest)
		bu, berr := j.Blobs.ReadBlob(ctx, p.Bundle)
		if err := errors.Join(merr, berr); err != nil {
			f.unreadable = append(f.unreadable, fmt.Errorf("the Zarf package's signature: %w", err))
			continue
		}
		f.packages = append(f.packages, archive.PackageSignature{Manifest: m, Bundle: bu})
	}
	v = judge(ctx, pol, rule, target, f)
	// A signature the store could not give is tried again next time.
	if len(f.unreadable) == 0 && ctx.Err() == nil {
		j.mu.Lock()
		j.memo[k] = v
		j.mu.Unlock()
	}
	return v
}

func sameCandidate(a, b ocispec.Descriptor) bool {
	return a.Digest == b.Digest && a.Annotations[oci.AnnotationRefName] == b.Annotations[oci.AnnotationRefName]
}

func packageKey(ps []runtime.PackageSignature) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString("\npackage " + p.Manifest.Digest.String() + " " + p.Bundle.Digest.String())
	}
	return b.String()
}

func candidateKey(ds []ocispec.Descriptor) string {
	keys := make([]string, 0, len(ds))
	for _, d := range ds {
		keys = append(keys, d.Digest.String()+" "+d.Annotations[oci.AnnotationRefName])
	}
	slices.Sort(keys)
	return strings.Join(keys, "\n")
}

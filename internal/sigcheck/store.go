package sigcheck

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
	"github.com/holdfast-project/holdfast/internal/policy"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/signature"
)

// Carried returns, for each image res names (cosign's tags aside), the
// signatures res carries that claim it, read from what the walk kept
// (Docs). A candidate that cannot be read is passed over: an import keeps
// what can be judged later.
func Carried(ctx context.Context, res *archive.Result) map[digest.Digest][]signature.Signature {
	candidates := Candidates(res)
	if len(candidates) == 0 {
		return nil
	}
	find := finder(ctx, candidates, Docs(res))
	out := map[digest.Digest][]signature.Signature{}
	for _, img := range res.Images {
		if _, tag := archive.CosignTag(img.Name); tag {
			continue
		}
		if _, ok := out[img.Target.Digest]; ok {
			continue
		}
		if f := find(img.Target); len(f.sigs) > 0 {
			out[img.Target.Digest] = f.sigs
		}
	}
	return out
}

// Judge judges images by the signatures a content store keeps for them:
// those each source's state recorded (runtime.SourceState.Signatures). It
// remembers its verdicts by policy, image target and signatures, so that a
// pass verifies again only what changed.
type Judge struct {
	mu   sync.Mutex
	pol  *policy.Policy
	memo map[memoKey]policy.Verdict
}

type memoKey struct {
	target digest.Digest
	rule   *policy.Rule
	sigs   string
}

// Verdicts returns the verdict of pol on each image the states want, by
// name and target, reading signatures with b. An image no rule matches is
// unchecked without a read.
func (j *Judge) Verdicts(ctx context.Context, pol *policy.Policy, states []runtime.SourceState, b signature.Blobs) func(name string, target ocispec.Descriptor) policy.Verdict {
	byTarget := map[digest.Digest][]ocispec.Descriptor{}
	packages := map[digest.Digest][]runtime.PackageSignature{}
	names := map[digest.Digest][]string{}  // every name the states give each image
	unrecorded := map[digest.Digest]bool{} // wanted by a state written before signatures were kept
	wants := 0
	for _, st := range states {
		wants += len(st.Images)
		for _, w := range st.Images {
			if _, tag := archive.CosignTag(w.Name); !tag {
				names[w.Target.Digest] = append(names[w.Target.Digest], w.Name)
			}
			if !st.SignaturesRecorded {
				unrecorded[w.Target.Digest] = true
			}
		}
		if p := st.Package; p != nil {
			for _, w := range st.Images {
				if !slices.ContainsFunc(packages[w.Target.Digest], func(o runtime.PackageSignature) bool {
					return o.Manifest.Digest == p.Manifest.Digest && o.Bundle.Digest == p.Bundle.Digest
				}) {
					packages[w.Target.Digest] = append(packages[w.Target.Digest], *p)
				}
			}
		}
		for t, ds := range st.Signatures {
			for _, d := range ds {
				if !slices.ContainsFunc(byTarget[t], func(o ocispec.Descriptor) bool { return sameCandidate(o, d) }) {
					byTarget[t] = append(byTarget[t], d)
				}
			}
		}
	}
	// Verdicts of images no source wants any more go: the memo stays
	// within a few times what the sources want.
	j.mu.Lock()
	if len(j.memo) > 2*wants+64 {
		j.memo = map[memoKey]policy.Verdict{}
	}
	j.mu.Unlock()
	own := func(name string, target ocispec.Descriptor) policy.Verdict {
		v := j.own(ctx, pol, name, target, byTarget[target.Digest], packages[target.Digest], b)
		if v.State == policy.Unsigned && unrecorded[target.Digest] {
			// Its source may well carry signatures: they were not kept.
			v.Reason = strings.TrimSuffix(v.Reason, ": no signature found") + ": " + ImportedBeforeSignatures
		}
		return v
	}
	var mu sync.Mutex
	judged := map[digest.Digest]map[string]policy.Verdict{}
	return func(name string, target ocispec.Descriptor) policy.Verdict {
		mu.Lock()
		v, ok := judged[target.Digest][name]
		mu.Unlock()
		if ok {
			return v
		}
		known := slices.Contains(names[target.Digest], name)
		vs := byImage(append(slices.Clone(names[target.Digest]), name), func(n string) policy.Verdict { return own(n, target) })
		if known {
			mu.Lock()
			judged[target.Digest] = vs
			mu.Unlock()
		}
		return vs[name]
	}
}

// ImportedBeforeSignatures is the reason given for an image no signature
// verifies whose source was imported by a holdfast that did not keep the
// signatures it carried.
const ImportedBeforeSignatures = "imported before signatures were kept: release and import it again"

// own is the verdict of pol on name alone, at target, whose candidate
// signatures and package signatures are given.
func (j *Judge) own(ctx context.Context, pol *policy.Policy, name string, target ocispec.Descriptor, candidates []ocispec.Descriptor, pkgs []runtime.PackageSignature, b signature.Blobs) policy.Verdict {
	rule, ok := pol.RuleFor(name)
	if !ok {
		return policy.Verdict{State: policy.Unchecked, Reason: "no rule matches"}
	}
	k := memoKey{target: target.Digest, rule: rule, sigs: candidateKey(candidates) + packageKey(pkgs)}
	j.mu.Lock()
	if j.pol != pol {
		j.pol, j.memo = pol, map[memoKey]policy.Verdict{}
	}
	v, ok := j.memo[k]
	j.mu.Unlock()
	if ok {
		return v
	}
	f := finder(ctx, candidates, b)(target)
	for _, p := range pkgs {
		m, merr := b.Read(ctx, p.Manifest)
		bu, berr := b.Read(ctx, p.Bundle)
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
		if j.pol == pol {
			j.memo[k] = v
		}
		j.mu.Unlock()
	}
	return v
}

func sameCandidate(a, b ocispec.Descriptor) bool {
	return a.Digest == b.Digest && a.Annotations[ocispec.AnnotationRefName] == b.Annotations[ocispec.AnnotationRefName]
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
		keys = append(keys, d.Digest.String()+" "+d.Annotations[ocispec.AnnotationRefName])
	}
	slices.Sort(keys)
	return strings.Join(keys, "\n")
}

// BlobReader reads small blobs from a content store, as an import's store
// (runtime.Store) does.
type BlobReader interface {
	ReadBlob(ctx context.Context, desc ocispec.Descriptor) ([]byte, error)
}

// StoreBlobs reads signatures from a content store.
func StoreBlobs(s BlobReader) signature.Blobs { return storeBlobs{s} }

type storeBlobs struct{ s BlobReader }

func (b storeBlobs) Read(ctx context.Context, desc ocispec.Descriptor) ([]byte, error) {
	return b.s.ReadBlob(ctx, desc)
}

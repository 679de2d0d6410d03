package signature

import (
	"context"
	"maps"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/archive"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/signature/layout"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
)

// TestDigestNameJudgedAsItsTag: a rule written for a tag (exact, or a tag
// pattern) refuses the unsigned image under its repo@digest name too, in a
// pass (Judge) and in verify (Check) alike; another repository's name for
// the same image is refused with it; an image verified under its tag is
// verified under its digest name, which no rule matches.
func TestDigestNameJudgedAsItsTag(t *testing.T) {
	k := sigtest.NewKey(t)
	for _, patterns := range []string{`"` + repo + `:v1", "` + repo + `:v2"`, `"` + repo + `:v*"`} {
		t.Run(patterns, func(t *testing.T) {
			pol := loadPolicy(t, sigtest.PublicPEM(t, k), "  - images: ["+patterns+"]\n    keys: [cosign.pub]\n")
			bad := image(repo+":v1", "unsigned")
			byDigest := image(repo+"@"+bad.Target.Digest.String(), "unsigned")
			alias := image("registry.example/other/app:1", "unsigned")
			good := image(repo+":v2", "signed")
			sig := sigtest.Legacy(t, repo, good.Target.Digest, k)
			goodDigest := image(repo+"@"+good.Target.Digest.String(), "signed")
			wants := []runtime.Want{{Name: bad.Name, Target: bad.Target}, {Name: byDigest.Name, Target: bad.Target},
				{Name: alias.Name, Target: bad.Target}, {Name: good.Name, Target: good.Target}, {Name: goodDigest.Name, Target: good.Target}}
			states := []runtime.SourceState{{Lease: "l", Images: wants, SignaturesRecorded: true,
				Signatures: map[digest.Digest][]ocispec.Descriptor{good.Target.Digest: {sig.Descriptor}}}}
			var j Judge
			pass := judgeOf(&j, pol, &memStore{blobs: sig.Blobs}, states)
			res := &archive.Result{Images: []archive.Image{bad, byDigest, alias, good, goodDigest}, Docs: maps.Clone(sig.Blobs),
				Skipped: []archive.Skipped{{Digest: sig.Descriptor.Digest, MediaType: sig.Descriptor.MediaType, Size: sig.Descriptor.Size}}}
			verify := map[string]Verdict{}
			for _, img := range Check(context.Background(), pol, res, layout.Docs(res)) {
				verify[img.Name] = img.Verdict
			}
			want := map[string]State{bad.Name: Unsigned, byDigest.Name: Unsigned, alias.Name: Unsigned,
				good.Name: Verified, goodDigest.Name: Verified}
			for _, w := range wants {
				v := pass.Of(w.Name, w.Target)
				if v.State != want[w.Name] {
					t.Errorf("pass: %s is %s, want %s", w.Name, v, want[w.Name])
				}
				if verify[w.Name] != v {
					t.Errorf("verify and a pass disagree on %s: %s / %s", w.Name, verify[w.Name], v)
				}
			}
			if r := pass.Of(byDigest.Name, bad.Target).Reason; !strings.Contains(r, "the image as "+bad.Name) {
				t.Errorf("the digest name's reason %q does not say which name refused it", r)
			}
			if !pol.Mode.Refuses(pass.Of(alias.Name, bad.Target)) && pol.Mode == Enforce {
				t.Errorf("the other repository's name of a refused image is not refused")
			}
		})
	}
}

// TestImportedBeforeSignatures: an image of a source whose state kept no
// signatures (written before they were kept) is not "no signature found"
// but says how to put it right.
func TestImportedBeforeSignatures(t *testing.T) {
	pol, states, store, w := storeScene(t)
	old := []runtime.SourceState{{Lease: "old", Images: []runtime.Want{{Name: repo + ":2", Target: image(repo+":2", "old").Target}}}}
	var j Judge
	v := judgeOf(&j, pol, store, append(states, old...)).Of(old[0].Images[0].Name, old[0].Images[0].Target)
	if v.State != Unsigned || !strings.HasSuffix(v.Reason, ": "+ImportedBeforeSignatures) || strings.Contains(v.Reason, "no signature found") {
		t.Errorf("verdict %q, want unsigned ending %q", v, ImportedBeforeSignatures)
	}
	states[0].SignaturesRecorded = true
	if v := judgeOf(&j, pol, store, states).Of(w.Name, w.Target); v.State != Verified {
		t.Errorf("a verified image of a recorded state: %s", v)
	}
}

package sigcheck

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/archive"
	"github.com/holdfast-project/holdfast/internal/policy"
	"github.com/holdfast-project/holdfast/internal/signature"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
)

const repo = "registry.example/team/app"

// loadPolicy writes a policy of these rules, and cosign.pub beside it.
func loadPolicy(t testing.TB, pub []byte, rules string) *policy.Policy {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cosign.pub"), pub, 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(p, []byte("rules:\n"+rules), 0o644); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

func image(name string, seed string) archive.Image {
	return archive.Image{Name: name, Target: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString(seed), Size: 100}}
}

// TestCheck: the verdicts of images of one target under two names, of an
// image no rule matches, and of a signature tag, which is no image; a
// candidate that cannot be read does not hide a signature that verifies,
// and is the reason when none does.
func TestCheck(t *testing.T) {
	k := sigtest.NewKey(t)
	pol := loadPolicy(t, sigtest.PublicPEM(t, k), `  - images: ["registry.example/team/*"]
    keys: [cosign.pub]
`)
	app, app2, other, bare := image(repo+":1", "app"), image(repo+":latest", "app"), image("docker.io/library/nginx:1", "nginx"), image(repo+":2", "bare")
	sig := sigtest.Legacy(t, repo, app.Target.Digest, k)
	tag := image(repo+":"+signature.SigTag(app.Target.Digest), "")
	tag.Target = sig.Descriptor
	missing := digest.FromString("a manifest the archive lacks")
	res := &archive.Result{
		Images:  []archive.Image{app, app2, tag, bare, other},
		Docs:    maps.Clone(sig.Blobs),
		Skipped: []archive.Skipped{{Digest: missing, Name: repo + ":" + signature.SigTag(bare.Target.Digest), Reason: "signature"}},
	}
	got := Check(context.Background(), pol, res, Docs(res))
	want := []struct {
		name   string
		state  policy.State
		reason string
	}{
		{app.Name, policy.Verified, "rule " + pol.Path + ":2"},
		{app2.Name, policy.Verified, "rule " + pol.Path + ":2"},
		{bare.Name, policy.Invalid, "a candidate signature cannot be read: manifest " + missing.String() + ": blob " + missing.String() + ": not in the archive"},
		{other.Name, policy.Unchecked, "no rule matches"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %d images", got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.name || g.State != w.state || !strings.Contains(g.Reason, w.reason) {
			t.Errorf("image %d: got %+v, want %s %s, reason containing %q", i, g, w.name, w.state, w.reason)
		}
	}
	if got[0].By != pol.Rules[0].Keys[0].Path {
		t.Errorf("verified by %q, want the key's path", got[0].By)
	}
}

// TestTrust: a rule's keys are named by their files; its keyless root and
// identities are given as they are.
func TestTrust(t *testing.T) {
	k := sigtest.NewKey(t)
	rule := &policy.Rule{
		Keys: []policy.Key{{Path: "/etc/keys/a.pub", Public: &k.PublicKey}},
		Keyless: &policy.Keyless{TrustedRootJSON: []byte("{}"), Identities: []policy.Identity{
			{Issuer: "https://issuer.example", SubjectRegExp: "^.*@example.com$"},
		}},
	}
	tr := Trust(rule)
	if len(tr.Keys) != 1 || tr.Keys[0].Name != "/etc/keys/a.pub" || tr.Keys[0].Public != &k.PublicKey {
		t.Errorf("keys %+v", tr.Keys)
	}
	if string(tr.TrustedRoot) != "{}" || len(tr.Identities) != 1 ||
		tr.Identities[0] != (signature.Identity{Issuer: "https://issuer.example", SubjectRegExp: "^.*@example.com$"}) {
		t.Errorf("keyless %+v", tr)
	}
}

// TestZarfPackageSignature: an image with no signature of its own is
// verified by its Zarf package's signature when the rule's key signed
// zarf.yaml; with another key, or over other bytes, it stays unsigned and
// the reason says the package's signature does not verify either.
func TestZarfPackageSignature(t *testing.T) {
	k, other := sigtest.NewKey(t), sigtest.NewKey(t)
	pol := loadPolicy(t, sigtest.PublicPEM(t, k), "  - images: [\"registry.example/team/*\"]\n    keys: [cosign.pub]\n")
	yaml := []byte("kind: ZarfPackageConfig\nmetadata:\n  name: demo\n")
	app := image(repo+":1", "app")
	for _, c := range []struct {
		name   string
		pkg    archive.PackageSignature
		state  policy.State
		reason string
	}{
		{"signed by the rule's key", archive.PackageSignature{Manifest: yaml, Bundle: sigtest.BlobBundle(t, k, yaml)}, policy.Verified, "the Zarf package's signature"},
		{"signed by another key", archive.PackageSignature{Manifest: yaml, Bundle: sigtest.BlobBundle(t, other, yaml)}, policy.Unsigned, "nor does the Zarf package's signature verify"},
		{"zarf.yaml changed", archive.PackageSignature{Manifest: append([]byte("# x\n"), yaml...), Bundle: sigtest.BlobBundle(t, k, yaml)}, policy.Unsigned, "nor does the Zarf package's signature verify"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := &archive.Result{Images: []archive.Image{app}, Package: &c.pkg}
			got := Check(context.Background(), pol, res, Docs(res))
			if len(got) != 1 || got[0].State != c.state || !strings.Contains(got[0].Reason, c.reason) {
				t.Fatalf("got %+v, want %s with a reason containing %q", got, c.state, c.reason)
			}
			if c.state == policy.Verified && got[0].By != pol.Rules[0].Keys[0].Path {
				t.Errorf("verified by %q, want the key's path", got[0].By)
			}
		})
	}
}

package signature

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
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/signature/layout"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
)

// repo is where the test images are said to come from.
const repo = sigtest.Repo

// loadPolicy writes a policy of these rules, and cosign.pub beside it.
func loadPolicy(t testing.TB, pub []byte, rules string) *Policy {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cosign.pub"), pub, 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "yaml")
	if err := os.WriteFile(p, []byte("rules:\n"+rules), 0o644); err != nil {
		t.Fatal(err)
	}
	pol, err := Load(p)
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
	tag := image(repo+":"+oci.SignatureTag(app.Target.Digest), "")
	tag.Target = sig.Descriptor
	missing := digest.FromString("a manifest the archive lacks")
	res := &archive.Result{
		Images:  []archive.Image{app, app2, tag, bare, other},
		Docs:    maps.Clone(sig.Blobs),
		Skipped: []archive.Skipped{{Digest: missing, Name: repo + ":" + oci.SignatureTag(bare.Target.Digest), Reason: "signature"}},
	}
	got := Check(context.Background(), pol, res, layout.Docs(res))
	want := []struct {
		name   string
		state  State
		reason string
	}{
		{app.Name, Verified, "rule " + pol.Path + ":2"},
		{app2.Name, Verified, "rule " + pol.Path + ":2"},
		{bare.Name, Invalid, "a candidate signature cannot be read: manifest " + missing.String() + ": blob " + missing.String() + ": not in the archive"},
		{other.Name, Unchecked, "no rule matches"},
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

// TestTrustOfRule: what a rule trusts is what signatures are verified
// against: its keys, named by their files, and its keyless root and
// identities (here a root that is no trusted root, which keyless
// signatures are then refused for).
func TestTrustOfRule(t *testing.T) {
	k := sigtest.NewKey(t)
	rule := &Rule{
		Keys: []Key{{Path: "/etc/keys/a.pub", Public: &k.PublicKey}},
		Keyless: &Keyless{TrustedRootJSON: []byte("{}"), Identities: []Identity{
			{Issuer: "https://issuer.example", SubjectRegExp: "^.*@example.com$"},
		}},
	}
	v := newVerifier(rule)
	if len(v.keys) != 1 || v.keys[0].name != "/etc/keys/a.pub" || v.keys[0].err != nil {
		t.Errorf("keys %+v", v.keys)
	}
	if len(v.identities) != 1 || !strings.HasPrefix(v.noKeyless, "trusted root: ") {
		t.Errorf("keyless: %d identities, %q", len(v.identities), v.noKeyless)
	}
	if v := newVerifier(&Rule{Keys: rule.Keys}); v.noKeyless != "it is keyless and no trusted root is given" {
		t.Errorf("a rule of keys alone: keyless %q", v.noKeyless)
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
		state  State
		reason string
	}{
		{"signed by the rule's key", archive.PackageSignature{Manifest: yaml, Bundle: sigtest.BlobBundle(t, k, yaml)}, Verified, "the Zarf package's signature"},
		{"signed by another key", archive.PackageSignature{Manifest: yaml, Bundle: sigtest.BlobBundle(t, other, yaml)}, Unsigned, "nor does the Zarf package's signature verify"},
		{"zarf.yaml changed", archive.PackageSignature{Manifest: append([]byte("# x\n"), yaml...), Bundle: sigtest.BlobBundle(t, k, yaml)}, Unsigned, "nor does the Zarf package's signature verify"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := &archive.Result{Images: []archive.Image{app}, Package: &c.pkg}
			got := Check(context.Background(), pol, res, layout.Docs(res))
			if len(got) != 1 || got[0].State != c.state || !strings.Contains(got[0].Reason, c.reason) {
				t.Fatalf("got %+v, want %s with a reason containing %q", got, c.state, c.reason)
			}
			if c.state == Verified && got[0].By != pol.Rules[0].Keys[0].Path {
				t.Errorf("verified by %q, want the key's path", got[0].By)
			}
		})
	}
}

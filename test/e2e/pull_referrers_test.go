package e2e

import (
	"crypto/ecdsa"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// referrerScene is two local registries, one with the OCI 1.1 referrers
// API and one without it (which lists referrers under the fallback tag
// <repo>:sha256-<hex>), each holding images whose only signatures are
// bundle referrers: made by cosign v3 sign --key, and made in the test as
// cosign v3 makes them (sigtest), signed by the policy's keys (signed) or
// by other keys (foreign). Policy is an enforce policy for both registries.
type referrerScene struct {
	signed, foreign []string // tag references
	policy          string
	servers         []*httptest.Server
}

// referrersRegistry runs go-containerregistry's registry on 127.0.0.1, with
// or without the referrers API.
func referrersRegistry(t *testing.T, api bool) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.WithReferrersSupport(api), registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return srv, strings.TrimPrefix(srv.URL, "http://")
}

func writeReferrerScene(t *testing.T) referrerScene {
	t.Helper()
	dir := tempDir(t)
	withV3 := true
	if _, err := exec.LookPath("cosign3"); err != nil && skipListed("cosign") {
		t.Logf("cosign3 is not on PATH (%s lists cosign): only the bundles made in the test are pulled", testenv.SkipVar)
		withV3 = false
	}
	platform, other := sigtest.NewKey(t), sigtest.NewKey(t)
	keys := []string{filepath.Join(dir, "sigtest.pub")}
	if err := os.WriteFile(keys[0], sigtest.PublicPEM(t, platform), 0o644); err != nil {
		t.Fatal(err)
	}
	var s referrerScene
	var patterns []string
	for _, api := range []bool{true, false} {
		srv, host := referrersRegistry(t, api)
		s.servers = append(s.servers, srv)
		patterns = append(patterns, `"`+host+`/e2e/*"`)
		for _, c := range []struct {
			repo  string
			key   any // a sigtest key, or cosign v3's key pair's prefix
			signs bool
		}{
			{"bundle-signed", platform, true}, {"bundle-foreign", other, false},
			{"v3-signed", "platform", true}, {"v3-foreign", "other", false},
		} {
			prefix, v3 := c.key.(string)
			if v3 && !withV3 {
				continue
			}
			ref := host + "/e2e/" + c.repo + ":1"
			dg := push(t, ref, build(t, fixture.ImageSpec{Names: []string{"e2e.local/referrers/" + c.repo + ":1"}}))
			if v3 {
				pub := signV3(t, dir, host+"/e2e/"+c.repo+"@"+dg, prefix)
				if c.signs && !slices.Contains(keys, pub) {
					keys = append(keys, pub)
				}
			} else {
				pushBundleReferrer(t, ref, c.key.(*ecdsa.PrivateKey))
			}
			if c.signs {
				s.signed = append(s.signed, ref)
			} else {
				s.foreign = append(s.foreign, ref)
			}
		}
	}
	s.policy = filepath.Join(dir, "policy.yaml")
	body := "mode: enforce\nrules:\n  - images: [" + strings.Join(patterns, ", ") + "]\n    keys: [" + strings.Join(keys, ", ") + "]\n"
	if err := os.WriteFile(s.policy, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

func skipListed(part string) bool {
	for _, p := range strings.Split(os.Getenv(testenv.SkipVar), ",") {
		if strings.TrimSpace(p) == part {
			return true
		}
	}
	return false
}

// pushBundleReferrer pushes, beside the image ref names in its registry, the
// referrer cosign v3 sign --key would push for it: a sigstore bundle of its
// statement signed by k, as the referrer's one layer. go-containerregistry's
// client writes the fallback tag's index when the registry has no
// referrers API.
func pushBundleReferrer(t *testing.T, ref string, k *ecdsa.PrivateKey) {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	head, err := remote.Head(r)
	if err != nil {
		t.Fatalf("reading %s back: %v", ref, err)
	}
	subject := ocispec.Descriptor{MediaType: string(head.MediaType), Digest: digest.Digest(head.Digest.String()), Size: head.Size}
	blobs := sigtest.Blobs{}
	d := blobs.Referrer(t, subject, sigtest.KeyBundle(t, k, sigtest.Statement(t, subject.Digest)))
	if err := blobs.Push(r.Context().Digest(d.Digest.String()).String(), d); err != nil {
		t.Fatalf("pushing the referrer of %s: %v", ref, err)
	}
}

// verdicts are the signature states status gives the images a source wants.
func verdicts(st signatureStatus) map[string]string {
	out := map[string]string{}
	for _, img := range st.Images {
		if img.Signature != nil {
			out[img.Name] = img.Signature.State
		}
	}
	return out
}

// TestPullListReferrers: under enforce, a pull list naming images whose
// only signatures are bundle referrers in a local registry, with the
// referrers API and without it, signed by cosign v3 and made in the test:
// those signed by the policy's keys are pinned and verified, those signed
// by other keys refused (invalid) and named nowhere. With the registries
// gone and a GC run, the next pass judges them alike from what the list's
// lease keeps.
func TestPullListReferrers(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		s := writeReferrerScene(t)
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		if err := os.MkdirAll(imagesDir, 0o755); err != nil {
			t.Fatal(err)
		}
		list := strings.Join(append(slices.Clone(s.signed), s.foreign...), "\n") + "\n"
		if err := os.WriteFile(filepath.Join(imagesDir, "pull.txt"), []byte(list), 0o644); err != nil {
			t.Fatal(err)
		}
		check := func(when string) {
			t.Helper()
			res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--policy", s.policy)
			if res.Code != 1 {
				t.Fatalf("sync %s exited %d, want 1 (the foreign images refused)\n%s%s", when, res.Code, res.Stdout, res.Stderr)
			}
			got := verdicts(d.signatureStatus(t, dataDir, imagesDir, s.policy))
			for _, ref := range s.signed {
				if got[ref] != "verified" || !d.isPinned(t, ref) {
					t.Errorf("%s: %s is %q, pinned %v; want verified and pinned", when, ref, got[ref], d.isPinned(t, ref))
				}
			}
			for _, ref := range s.foreign {
				if _, ok := d.record(t, ref); ok {
					t.Errorf("%s: %s is signed by another key, but containerd has a record of it", when, ref)
				}
				if want := "image " + ref + " refused by the signature policy: invalid"; !strings.Contains(res.Stderr, want) {
					t.Errorf("%s: sync does not say %q", when, want)
				}
			}
			if t.Failed() {
				t.Fatalf("sync %s said:\n%s", when, res.Stderr)
			}
		}
		check("with the registries")
		// The registries gone and a GC run, the signatures are what the
		// list's lease holds.
		for _, srv := range s.servers {
			srv.Close()
		}
		d.gcWithControl(t, "e2e.local/referrers/gc-control:1")
		check("with the registries gone, after a GC")
	})
}

// TestPullRequiredReferrers: under enforce, `holdfast run --pull-required`
// given a required set (PUT /required) naming the same images pulls them
// from the local registries: those signed by the policy's keys are pinned
// and verified, the others refused and named nowhere.
func TestPullRequiredReferrers(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		s := writeReferrerScene(t)
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		if err := os.MkdirAll(imagesDir, 0o755); err != nil {
			t.Fatal(err)
		}
		a := startAgent(t, d, dataDir, []string{imagesDir}, "--pull-required", "--settle", "200ms", "--policy", s.policy)
		var entries []string
		for _, ref := range append(slices.Clone(s.signed), s.foreign...) {
			entries = append(entries, `{"ref":"`+ref+`","usedBy":["Deployment shop/app containers/app"]}`)
		}
		a.put(t, "/required", `{"images":[`+strings.Join(entries, ",")+`]}`)
		eventually(t, "the signed images pinned", func() bool {
			for _, ref := range s.signed {
				if !d.isPinned(t, ref) {
					return false
				}
			}
			return true
		})
		// The foreign images may be judged a pass later than the others.
		var st signatureStatus
		refused := map[string]string{}
		eventually(t, "the foreign images judged", func() bool {
			st = d.signatureStatus(t, dataDir, imagesDir, s.policy)
			for _, r := range st.Refused {
				refused[r.Name] = r.Signature.State
			}
			for _, ref := range s.foreign {
				if _, ok := refused[ref]; !ok {
					return false
				}
			}
			return true
		})
		got := verdicts(st)
		for _, ref := range s.signed {
			if got[ref] != "verified" {
				t.Errorf("%s is %q, want verified", ref, got[ref])
			}
		}
		for _, ref := range s.foreign {
			if refused[ref] != "invalid" {
				t.Errorf("%s, signed by another key: refused as %q, want invalid (refused: %+v)", ref, refused[ref], st.Refused)
			}
			if _, ok := d.record(t, ref); ok {
				t.Errorf("%s is refused, but containerd has a record of it", ref)
			}
		}
	})
}

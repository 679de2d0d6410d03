package e2e

import (
	"archive/tar"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// cosign3Bin is cosign v3, which make deps builds beside v2 (scripts/cosign.sh).
func cosign3Bin(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("cosign3")
	if err != nil {
		testenv.Missing(t, "cosign", "cosign3 (cosign v3) is not on PATH (make deps builds it into bin/): "+err.Error())
	}
	return bin
}

// cosign3 runs cosign v3 in dir as cosign runs v2: an empty key password,
// no network but the local registry's. It fails t unless cosign succeeds.
func cosign3(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(cosign3Bin(t), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "COSIGN_PASSWORD=", "COSIGN_YES=true", "SIGSTORE_NO_CACHE=true", "TUF_ROOT="+filepath.Join(dir, "tuf"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cosign3 %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// offlineSigningConfig is the file in dir that names no transparency log,
// timestamp authority or certificate authority: cosign v3 signs by key
// offline only with such a config (it refuses --tlog-upload=false). It is
// written once per dir.
func offlineSigningConfig(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "offline-signing-config.json")
	if _, err := os.Stat(p); err != nil {
		cosign3(t, dir, "signing-config", "create", "--out", p)
	}
	return p
}

// signV3 signs ref (repo@digest in a registry on 127.0.0.1) with cosign v3's
// defaults by the key pair keyPrefix.key/.pub in dir (made with
// generate-key-pair if absent), offline: a sigstore bundle pushed as an OCI
// 1.1 referrer manifest whose subject is the image (a registry without the
// referrers API gets it under the fallback tag sha256-<hex>). It returns the
// public key's path.
func signV3(t *testing.T, dir, ref, keyPrefix string) string {
	t.Helper()
	key := filepath.Join(dir, keyPrefix+".key")
	if _, err := os.Stat(key); err != nil {
		cosign3(t, dir, "generate-key-pair", "--output-key-prefix", keyPrefix)
	}
	cosign3(t, dir, "sign", "--key", key, "--signing-config", offlineSigningConfig(t, dir), "--allow-http-registry", ref)
	return filepath.Join(dir, keyPrefix+".pub")
}

// pushExact uploads img to ref as the generator wrote it (push lets
// go-containerregistry write a manifest of its own): the registry's digest
// is img.Target.Digest, so that a layout written by the generator holds the
// image a signature in the registry names. img is one manifest.
func pushExact(t *testing.T, ref string, img *fixture.Image) string {
	t.Helper()
	dir := filepath.Join(tempDir(t), "layout")
	if err := fixture.WriteOCIDir(context.Background(), dir, fixture.OCIOptions{}, img); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	h, err := v1.NewHash(img.Target.Digest.String())
	if err != nil {
		t.Fatal(err)
	}
	v1img, err := idx.Image(h)
	if err != nil {
		t.Fatalf("reading %s back: %v", img.Target.Digest, err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, v1img); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	return img.Target.Digest.String()
}

// bundleReferrer reads from the registry the one referrer cosign v3 left for
// the image repo@dg (under the fallback tag sha256-<hex>): its manifest's
// descriptor and the bytes of the manifest, its config and its layer.
func bundleReferrer(t *testing.T, repo, dg string) (ocispec.Descriptor, [][]byte) {
	t.Helper()
	fallback, err := name.ParseReference(repo + ":" + strings.Replace(dg, ":", "-", 1))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(fallback)
	if err != nil {
		t.Fatalf("reading the referrers cosign v3 left under %s: %v", fallback, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].ArtifactType != oci.MediaTypeSigstoreBundle {
		t.Fatalf("referrers of %s: %+v, want one of artifact type %s", dg, im.Manifests, oci.MediaTypeSigstoreBundle)
	}
	ref, err := name.ParseReference(repo + "@" + im.Manifests[0].Digest.String())
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatalf("reading the referrer %s: %v", ref, err)
	}
	raw, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	blobs := [][]byte{raw, cfg}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		blobs = append(blobs, b)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if m.Subject == nil || m.Subject.Digest.String() != dg {
		t.Fatalf("the referrer %s names the subject %+v, want %s", ref, m.Subject, dg)
	}
	d := ocispec.Descriptor{MediaType: m.MediaType, Digest: digest.Digest(im.Manifests[0].Digest.String()), Size: int64(len(raw))}
	return d, blobs
}

// tarDir writes the files under dir as a tar at out, named from dir's root
// (oci-layout, index.json, blobs/sha256/<hex>): an OCI archive of a layout.
func tarDir(t *testing.T, dir, out string) {
	t.Helper()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatalf("writing %s: %v", out, err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeV3Haul writes a Hauler haul (haul.tar.zst) of img, named as its
// Names say, and the cosign v3 bundle referrer d (blobs: its manifest,
// config and layer), listed as Hauler lists referrers: kind
// dev.hauler/referrers/<the referrer's hex>, under the image's names.
func writeV3Haul(t *testing.T, out string, img *fixture.Image, d ocispec.Descriptor, blobs [][]byte) {
	t.Helper()
	var arts []fixture.Artifact
	for _, n := range img.Names {
		ad := d
		ad.Annotations = map[string]string{
			fixture.AnnotationKind:        "dev.hauler/referrers/" + d.Digest.Encoded(),
			fixture.AnnotationImageName:   n,
			fixture.AnnotationRefName:     strings.SplitN(n, "/", 2)[1],
			fixture.AnnotationOriginalRef: n,
		}
		arts = append(arts, fixture.Artifact{Descriptor: ad, Blobs: blobs})
	}
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zw, err := fixture.Compress(f, fixture.Zstd, fixture.CompressOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := fixture.WriteHaul(context.Background(), zw, fixture.HaulOptions{Artifacts: arts}, img); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCosignV3SignedCarriers: an image signed by cosign v3 itself (its
// defaults: a sigstore bundle as an OCI 1.1 referrer, by key, offline) in a
// local registry, carried three ways: the layout cosign save writes (whose
// index.json lists the image only: the referrer's blobs are there,
// unlisted), that layout as an OCI archive (a tar of it, named with --name),
// and a Hauler haul listing the referrer as Hauler does. On every daemon,
// verify says verified and import under enforce pins it, for each carrier;
// an image signed by another key and saved the same way is refused by both.
func TestCosignV3SignedCarriers(t *testing.T) {
	cosign3Bin(t)
	dir := tempDir(t)
	_, host := startRegistry(t)
	signed := build(t, fixture.ImageSpec{Names: []string{"e2e.local/cosign3/signed:1"}})
	foreign := build(t, fixture.ImageSpec{Names: []string{"e2e.local/cosign3/foreign:1"}})
	sdg := pushExact(t, host+"/e2e/signed:1", signed)
	fdg := pushExact(t, host+"/e2e/foreign:1", foreign)
	pub := signV3(t, dir, host+"/e2e/signed@"+sdg, "platform")
	signV3(t, dir, host+"/e2e/foreign@"+fdg, "other")

	saved := filepath.Join(dir, "saved")
	cosign3(t, dir, "save", "--allow-http-registry", "--dir", filepath.Join(saved, "signed"), host+"/e2e/signed@"+sdg)
	cosign3(t, dir, "save", "--allow-http-registry", "--dir", filepath.Join(saved, "foreign"), host+"/e2e/foreign@"+fdg)
	tarDir(t, filepath.Join(saved, "signed"), filepath.Join(dir, "signed.tar"))
	haulImg := *signed
	haulImg.Names = []string{"e2e.local/cosign3/haul:1"}
	rd, rblobs := bundleReferrer(t, host+"/e2e/signed", sdg)
	writeV3Haul(t, filepath.Join(dir, "haul.tar.zst"), &haulImg, rd, rblobs)

	carriers := []struct {
		what, path, name string // name: given with --name, else the carrier's own
		image            string
	}{
		{"cosign save layout", filepath.Join(saved, "signed"), "e2e.local/cosign3/dir:1", "e2e.local/cosign3/dir:1"},
		{"OCI archive of it", filepath.Join(dir, "signed.tar"), "e2e.local/cosign3/tar:1", "e2e.local/cosign3/tar:1"},
		{"Hauler haul", filepath.Join(dir, "haul.tar.zst"), "", "e2e.local/cosign3/haul:1"},
	}
	named := func(args []string, n string) []string {
		if n != "" {
			args = append(args, "--name", n)
		}
		return args
	}
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dataDir := filepath.Join(tempDir(t), "data")
		pol := filepath.Join(tempDir(t), "policy.yaml")
		body := "mode: enforce\nrules:\n  - images: [\"e2e.local/cosign3/*\"]\n    keys: [" + pub + "]\n"
		if err := os.WriteFile(pol, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, c := range carriers {
			v := holdfast(t, append(named([]string{"verify", "--policy", pol, "-o", "json"}, c.name), c.path)...)
			if st := verifyStates(t, v)[c.image]; v.Code != 0 || st != "verified" {
				t.Errorf("verify of the %s: exit %d, %s %q, want 0 and verified\n%s%s", c.what, v.Code, c.image, st, v.Stdout, v.Stderr)
			}
			res := holdfast(t, append(named([]string{"import", "--address", d.Address, "--data-dir", dataDir, "--policy", pol}, c.name), c.path)...)
			if res.Code != 0 {
				t.Errorf("import of the %s exited %d\n%s%s", c.what, res.Code, res.Stdout, res.Stderr)
				continue
			}
			if want := c.image + ": signature: verified by " + pub; !strings.Contains(res.Stdout, want) {
				t.Errorf("import of the %s does not say %q:\n%s", c.what, want, res.Stdout)
			}
			d.requirePinned(t, c.image)
		}

		const other = "e2e.local/cosign3/foreign:1"
		path := filepath.Join(saved, "foreign")
		v := holdfast(t, "verify", "--policy", pol, "-o", "json", "--name", other, path)
		if st := verifyStates(t, v)[other]; v.Code != 1 || st != "invalid" {
			t.Errorf("verify of the image signed by another key: exit %d, %q, want 1 and invalid\n%s%s", v.Code, st, v.Stdout, v.Stderr)
		}
		res := holdfast(t, "import", "--address", d.Address, "--data-dir", dataDir, "--policy", pol, "--name", other, path)
		if want := "image " + other + " refused by the signature policy: invalid"; res.Code != 1 || !strings.Contains(res.Stderr, want) {
			t.Errorf("import of the image signed by another key exited %d, want 1 and %q:\n%s%s", res.Code, want, res.Stdout, res.Stderr)
		}
		if _, ok := d.record(t, other); ok {
			t.Errorf("%s refused, but containerd has a record of that name", other)
		}
	})
}

// verifyStates reads holdfast verify -o json: the state of each name.
func verifyStates(t *testing.T, res result) map[string]string {
	t.Helper()
	var v struct {
		Images []struct{ Name, State string } `json:"images"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &v); err != nil {
		t.Fatalf("verify -o json: %v\n%s%s", err, res.Stdout, res.Stderr)
	}
	out := map[string]string{}
	for _, img := range v.Images {
		out[img.Name] = img.State
	}
	return out
}

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

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

// TestCosignV3SignsAsReferrer: signV3 leaves in the registry a referrer of
// the image that is a sigstore bundle, under the fallback tag of the image's
// digest.
func TestCosignV3SignsAsReferrer(t *testing.T) {
	cosign3Bin(t)
	dir := tempDir(t)
	_, host := startRegistry(t)
	im := build(t, fixture.ImageSpec{Names: []string{"e2e.local/cosign3/signed:1"}})
	dg := push(t, host+"/e2e/signed:1", im)
	signV3(t, dir, host+"/e2e/signed@"+dg, "platform")

	fallback, err := name.ParseReference(host + "/e2e/signed:" + strings.Replace(dg, ":", "-", 1))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(fallback)
	if err != nil {
		t.Fatalf("reading the referrers cosign v3 left under %s: %v", fallback, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].ArtifactType != oci.MediaTypeSigstoreBundle {
		t.Fatalf("referrers of %s: %+v, want one of artifact type %s", dg, m.Manifests, oci.MediaTypeSigstoreBundle)
	}
}

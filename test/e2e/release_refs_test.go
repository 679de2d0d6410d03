package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
)

// checkReleaseExport: holdfast export of the release's image, imported
// into d (data dir dataDir), carries what the release archive held of it:
// the SBOM referrer at the same digest and subject, and the signatures of
// the index, of each platform's manifest and of the SBOM, every referrer's
// manifest and blobs byte for byte; holdfast verify of the export under a
// policy with the release key says verified, and so does it for each
// architecture's manifest alone.
func checkReleaseExport(t *testing.T, d *daemon, dataDir, dist string, rel release) {
	t.Helper()
	imageName := ownRepo + ":" + releaseVersion
	out := filepath.Join(tempDir(t), "export.tar")
	res := holdfast(t, "export", "--address", d.Address, "--data-dir", dataDir, "--compression", "none", "-o", out, imageName)
	if res.Code != 0 {
		t.Fatalf("holdfast export %s: exit %d\n%s%s", imageName, res.Code, res.Stdout, res.Stderr)
	}
	t.Logf("holdfast export: %s", res.Stderr)
	var exp release
	readReleaseImage(t, out, &exp)
	if exp.index.Digest != rel.index.Digest {
		t.Fatalf("the export's image is %s, the release's %s", exp.index.Digest, rel.index.Digest)
	}
	sboms := rel.referrersOf(rel.index.Digest.String())[oci.MediaTypeCycloneDX]
	if got := exp.referrersOf(rel.index.Digest.String())[oci.MediaTypeCycloneDX]; len(sboms) != 1 || len(got) != 1 || got[0].Digest != sboms[0].Digest {
		t.Errorf("the export lists the SBOM referrers %+v of the image, want the release's %+v", got, sboms)
	}
	subjects := append([]ocispec.Descriptor{rel.index}, rel.platforms...)
	if len(sboms) == 1 {
		subjects = append(subjects, sboms[0])
	}
	for _, s := range subjects {
		want := rel.referrersOf(s.Digest.String())[oci.MediaTypeSigstoreBundle]
		got := exp.referrersOf(s.Digest.String())[oci.MediaTypeSigstoreBundle]
		if len(want) != 1 || len(got) != 1 || got[0].Digest != want[0].Digest {
			t.Errorf("the export lists the signature referrers %+v of %s, want the release's %+v", got, s.Digest, want)
		}
	}
	if len(exp.referrers) != len(rel.referrers) {
		t.Errorf("the export lists %d referrers, the release %d: %+v", len(exp.referrers), len(rel.referrers), exp.referrers)
	}
	for _, r := range rel.referrers {
		same := func(d string) {
			t.Helper()
			if a, b := rel.blob(t, d), exp.blobs["blobs/sha256/"+d[len("sha256:"):]]; !bytes.Equal(a, b) {
				t.Errorf("blob %s of referrer %s: the export holds %d bytes, not the release's %d", d, r.Digest, len(b), len(a))
			}
		}
		same(r.Digest.String())
		var m ocispec.Manifest
		if err := json.Unmarshal(rel.blob(t, r.Digest.String()), &m); err != nil {
			t.Fatal(err)
		}
		for _, b := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
			same(b.Digest.String())
		}
	}

	pol := releasePolicy(t, dist)
	v := holdfast(t, "verify", "--policy", pol, "-o", "json", out)
	if st := verifyStates(t, v); v.Code != 0 || len(st) != 1 || st[imageName] != "verified" {
		t.Errorf("holdfast verify of the export: exit %d, %v, want 0 and only %s verified\n%s%s", v.Code, st, imageName, v.Stdout, v.Stderr)
	}
	for _, p := range exp.platforms {
		one := filepath.Join(tempDir(t), "layout")
		n := imageName + "-" + p.Platform.Architecture
		writePlatformLayout(t, one, out, exp, p, n)
		// The export's manifest.json names the image by its tag at the
		// host's manifest: the platform's manifest alone is judged here.
		if err := os.Remove(filepath.Join(one, "manifest.json")); err != nil {
			t.Fatal(err)
		}
		v := holdfast(t, "verify", "--policy", pol, "-o", "json", one)
		if st := verifyStates(t, v)[n]; v.Code != 0 || st != "verified" {
			t.Errorf("holdfast verify of the export's %s manifest alone: exit %d, %q, want 0 and verified\n%s%s", p.Platform.Architecture, v.Code, st, v.Stdout, v.Stderr)
		}
	}
}

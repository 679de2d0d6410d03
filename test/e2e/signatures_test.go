package e2e

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
)

// signedScene is an archive of three images under one policy rule: one
// signed by the policy's key, one by another key, one unsigned; the
// signatures ride in the archive as cosign saves them: in an OCI archive as
// <repo>:sha256-<hex>.sig, in a Hauler haul as entries of kind
// dev.hauler/sigs named as the image they sign.
type signedScene struct {
	dir, archive, policyDir string
	signed, foreign, bare   string
}

func writeSignedScene(t *testing.T, imagesDir string) signedScene {
	t.Helper()
	return writeSignedSceneAs(t, imagesDir, "oci")
}

// writeSignedSceneAs writes the scene as format: "oci" or "haul".
func writeSignedSceneAs(t *testing.T, imagesDir, format string) signedScene {
	t.Helper()
	dir := tempDir(t)
	archive := filepath.Join(imagesDir, "signed.tar")
	if format == "haul" {
		archive = filepath.Join(imagesDir, "haul.tar.zst")
	}
	s := signedScene{
		dir:       dir,
		archive:   archive,
		policyDir: filepath.Join(dir, "policy"),
		signed:    "e2e.local/sig/" + format + "-signed:1",
		foreign:   "e2e.local/sig/" + format + "-foreign:1",
		bare:      "e2e.local/sig/" + format + "-bare:1",
	}
	key, other := sigtest.NewKey(t), sigtest.NewKey(t)
	if err := os.MkdirAll(s.policyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.policyDir, "platform.pub"), sigtest.PublicPEM(t, key), 0o644); err != nil {
		t.Fatal(err)
	}
	signed := build(t, fixture.ImageSpec{Names: []string{s.signed}})
	foreign := build(t, fixture.ImageSpec{Names: []string{s.foreign}})
	bare := build(t, fixture.ImageSpec{Names: []string{s.bare}})
	sig := func(img *fixture.Image, k *ecdsa.PrivateKey) fixture.Artifact {
		repo, _, _ := strings.Cut(img.Names[0], ":")
		m := sigtest.Legacy(t, repo, img.Target.Digest, k)
		desc := m.Descriptor
		desc.Annotations = map[string]string{ocispec.AnnotationRefName: repo + ":" + oci.SignatureTag(img.Target.Digest)}
		if format == "haul" {
			desc.Annotations = map[string]string{fixture.AnnotationKind: "dev.hauler/sigs",
				fixture.AnnotationImageName: img.Names[0], ocispec.AnnotationRefName: strings.TrimPrefix(img.Names[0], "e2e.local/")}
		}
		return fixture.Artifact{Descriptor: desc, Blobs: m.Bytes()}
	}
	sigs := []fixture.Artifact{sig(signed, key), sig(foreign, other)}
	if format == "haul" {
		writeArchive(t, s.archive, fixture.Zstd, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
			return fixture.WriteHaul(ctx, w, fixture.HaulOptions{Artifacts: sigs}, signed, foreign, bare)
		})
		return s
	}
	writeArchive(t, s.archive, fixture.None, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameOCIFull, Artifacts: sigs}, signed, foreign, bare)
	})
	return s
}

// writePolicy writes the scene's policy in mode, its rule over e2e.local/sig/*.
func (s signedScene) writePolicy(t *testing.T, mode string) string {
	t.Helper()
	p := filepath.Join(s.policyDir, "policy.yaml")
	body := "mode: " + mode + "\nrules:\n  - images: [\"e2e.local/sig/*\"]\n    keys: [platform.pub]\n"
	if err := os.WriteFile(p+".tmp", []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		t.Fatal(err)
	}
	return p
}

// signatureStatus is what status -o json says of signatures.
type signatureStatus struct {
	Images []struct {
		Name      string `json:"name"`
		Pinned    bool   `json:"pinned"`
		Signature *struct {
			State, By, Reason string
		} `json:"signature"`
	} `json:"images"`
	Refused []struct {
		Name      string `json:"name"`
		Source    string `json:"source"`
		Signature struct {
			State, By, Reason string
		} `json:"signature"`
	} `json:"refused"`
}

func (d *daemon) signatureStatus(t *testing.T, dataDir, imagesDir, pol string) signatureStatus {
	t.Helper()
	res := holdfast(t, "status", "-o", "json", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--policy", pol)
	if res.Code != 0 {
		t.Fatalf("status exited %d\n%s", res.Code, res.Stderr)
	}
	var st signatureStatus
	if err := json.Unmarshal([]byte(res.Stdout), &st); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, res.Stdout)
	}
	return st
}

// TestSignaturePolicyEnforce: under enforce, of an archive holding one image
// signed by the policy's key, one signed by another key and one unsigned,
// only the first is named and pinned; the exit code, the errors and status
// say why for each of the others; as an OCI archive and as a haul. Under
// warn all three are pinned and the
// verdicts reported. Back under enforce, holdfast unpins the two it pinned,
// without reading the archive again.
func TestSignaturePolicyEnforce(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		for _, format := range []string{"oci", "haul"} {
			t.Run(format, func(t *testing.T) { signaturePolicyEnforce(t, d, format) })
		}
	})
}

func signaturePolicyEnforce(t *testing.T, d *daemon, format string) {
	{
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		s := writeSignedSceneAs(t, imagesDir, format)
		pol := s.writePolicy(t, "enforce")

		res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--policy", pol)
		if res.Code != 1 {
			t.Fatalf("sync under enforce exited %d, want 1\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
		}
		for _, want := range []string{
			"image " + s.foreign + " refused by the signature policy: invalid",
			"image " + s.bare + " refused by the signature policy: unsigned",
		} {
			if !strings.Contains(res.Stderr, want) {
				t.Errorf("sync's errors do not say %q:\n%s", want, res.Stderr)
			}
		}
		d.requirePinned(t, s.signed)
		// plan says what a pass would refuse.
		plan := holdfast(t, "plan", "-o", "json", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--policy", pol)
		var actions struct {
			Actions []struct{ Action, Name, Reason string } `json:"actions"`
		}
		if err := json.Unmarshal([]byte(plan.Stdout), &actions); err != nil {
			t.Fatalf("plan -o json: %v\n%s\n%s", err, plan.Stdout, plan.Stderr)
		}
		refusedByPlan := map[string]string{}
		for _, a := range actions.Actions {
			if a.Action == "refuse" {
				refusedByPlan[a.Name] = a.Reason
			}
		}
		if !strings.HasPrefix(refusedByPlan[s.foreign], "invalid") || !strings.HasPrefix(refusedByPlan[s.bare], "unsigned") || refusedByPlan[s.signed] != "" {
			t.Errorf("plan refuses %v, want %s invalid and %s unsigned", refusedByPlan, s.foreign, s.bare)
		}
		for _, n := range []string{s.foreign, s.bare} {
			if _, ok := d.record(t, n); ok {
				t.Errorf("%s refused, but containerd has a record of that name", n)
			}
			if found, _ := d.criImage(t, n); found {
				t.Errorf("%s refused, but the CRI knows it", n)
			}
		}
		st := d.signatureStatus(t, dataDir, imagesDir, pol)
		verdicts := map[string]string{}
		for _, img := range st.Images {
			if img.Signature != nil {
				verdicts[img.Name] = img.Signature.State + " " + img.Signature.By
			}
		}
		if v := verdicts[s.signed]; v != "verified "+filepath.Join(s.policyDir, "platform.pub") {
			t.Errorf("status: %s signature %q, want verified by the policy's key", s.signed, v)
		}
		refused := map[string]string{}
		for _, r := range st.Refused {
			if !strings.HasPrefix(r.Name, "e2e.local/sig/"+format+"-") {
				continue // another scene's, on the same containerd
			}
			refused[r.Name] = r.Signature.State
			if r.Source != s.archive || r.Signature.Reason == "" {
				t.Errorf("status: refused %s from %q, reason %q", r.Name, r.Source, r.Signature.Reason)
			}
		}
		if refused[s.foreign] != "invalid" || refused[s.bare] != "unsigned" || len(refused) != 2 {
			t.Errorf("status: refused %v, want %s invalid and %s unsigned", refused, s.foreign, s.bare)
		}

		// Warn: all three pinned, the verdicts reported; nothing is read again.
		pol = s.writePolicy(t, "warn")
		res = holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--policy", pol)
		if res.Code != 0 {
			t.Fatalf("sync under warn exited %d\n%s", res.Code, res.Stderr)
		}
		if !strings.Contains(res.Stdout, "0 imported, 1 unchanged") {
			t.Errorf("the archive was read again: %s", res.Stdout)
		}
		d.requirePinned(t, s.signed, s.foreign, s.bare)
		st = d.signatureStatus(t, dataDir, imagesDir, pol)
		for _, r := range st.Refused {
			if r.Source == s.archive {
				t.Errorf("status under warn lists a refused image: %+v", r)
			}
		}
		states := map[string]string{}
		for _, img := range st.Images {
			if img.Signature != nil {
				states[img.Name] = img.Signature.State
			}
		}
		if states[s.signed] != "verified" || states[s.foreign] != "invalid" || states[s.bare] != "unsigned" {
			t.Errorf("status under warn: verdicts %v", states)
		}

		// Enforce again: holdfast unpins what it pinned of the two.
		pol = s.writePolicy(t, "enforce")
		res = holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--policy", pol)
		if res.Code != 1 {
			t.Fatalf("sync back under enforce exited %d\n%s", res.Code, res.Stderr)
		}
		d.requirePinned(t, s.signed)
		for _, n := range []string{s.foreign, s.bare} {
			if cri, hf := d.pinnedBy(t, n); cri || hf {
				t.Errorf("%s refused, still pinned (cri %t, holdfast %t)", n, cri, hf)
			}
		}
	}
}

// TestSignaturePolicyUnderRun: holdfast run with a policy in warn pins all
// three; the policy edited to enforce is taken at the next pass: the two
// refused are unpinned, an Event names each, and the metric counts the
// verdicts. A bad edit keeps the last good policy and says so.
func TestSignaturePolicyUnderRun(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		s := writeSignedScene(t, imagesDir)
		pol := s.writePolicy(t, "warn")
		a := startAgent(t, d, dataDir, []string{imagesDir}, "--policy", pol, "--resync", "2s")
		eventually(t, "all three pinned under warn", func() bool {
			return d.isPinned(t, s.signed) && d.isPinned(t, s.foreign) && d.isPinned(t, s.bare)
		})
		eventually(t, "the verdict metric", func() bool {
			return a.metric(t, "holdfast_signature_images", map[string]string{"state": "verified"}) == 1 &&
				a.metric(t, "holdfast_signature_images", map[string]string{"state": "unsigned"}) == 1 &&
				a.metric(t, "holdfast_signature_images", map[string]string{"state": "invalid"}) == 1
		})

		s.writePolicy(t, "enforce")
		eventually(t, "the refused images unpinned under enforce", func() bool {
			return d.isPinned(t, s.signed) && !d.isPinned(t, s.foreign) && !d.isPinned(t, s.bare)
		})
		eventually(t, "an Event naming each refused image", func() bool {
			_, body := a.get(t, "/report")
			return strings.Contains(body, "image "+s.foreign+" refused") && strings.Contains(body, "image "+s.bare+" refused")
		})

		// A bad edit: the last good policy (enforce) stays, and it is said.
		if err := os.WriteFile(pol, []byte("mode: enforce\nrules:\n  - images: [\"*\"]\n    keys: [missing.pub]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the bad policy reported", func() bool {
			return a.logged("the signature policy file is bad", nil) > 0
		})
		if !d.isPinned(t, s.signed) || d.isPinned(t, s.foreign) {
			t.Errorf("after a bad edit, the last good policy is not what holds")
		}
	})
}

// isPinned says whether name has a record holdfast pinned.
func (d *daemon) isPinned(t *testing.T, name string) bool {
	t.Helper()
	cri, hf := d.pinnedBy(t, name)
	return cri && hf
}

// TestSignaturePolicyImport: holdfast import under enforce pins the image
// the policy's key signed, names neither of the others, exits 1 naming
// each refused image, and prints every verdict.
func TestSignaturePolicyImport(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		s := writeSignedScene(t, filepath.Join(dir, "carried"))
		pol := s.writePolicy(t, "enforce")
		res := holdfast(t, "import", "--address", d.Address, "--data-dir", filepath.Join(dir, "data"), "--policy", pol, s.archive)
		if res.Code != 1 {
			t.Fatalf("import under enforce exited %d, want 1\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
		}
		for _, want := range []string{s.signed + ": signature: verified by " + filepath.Join(s.policyDir, "platform.pub"),
			s.foreign + ": signature: invalid", s.bare + ": signature: unsigned"} {
			if !strings.Contains(res.Stdout, want) {
				t.Errorf("import's output does not say %q:\n%s", want, res.Stdout)
			}
		}
		for _, n := range []string{s.foreign, s.bare} {
			if !strings.Contains(res.Stderr, "image "+n+" refused by the signature policy") {
				t.Errorf("import's errors do not name %s:\n%s", n, res.Stderr)
			}
			if _, ok := d.record(t, n); ok {
				t.Errorf("%s refused, but containerd has a record of that name", n)
			}
		}
		d.requirePinned(t, s.signed)
	})
}

// TestSignaturePolicyZarfPackage: under enforce, the images of a Zarf
// package whose zarf.yaml the policy's key signed (zarf.bundle.sig) are
// pinned though they carry no signature of their own, and status says the
// package's signature verified them; those of a package signed by another
// key are refused.
func TestSignaturePolicyZarfPackage(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		key, other := sigtest.NewKey(t), sigtest.NewKey(t)
		if err := os.WriteFile(filepath.Join(dir, "platform.pub"), sigtest.PublicPEM(t, key), 0o644); err != nil {
			t.Fatal(err)
		}
		pol := filepath.Join(dir, "policy.yaml")
		if err := os.WriteFile(pol, []byte("mode: enforce\nrules:\n  - images: [\"e2e.local/zarfsig/*\"]\n    keys: [platform.pub]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		good := build(t, fixture.ImageSpec{Names: []string{"e2e.local/zarfsig/good:1"}})
		bad := build(t, fixture.ImageSpec{Names: []string{"e2e.local/zarfsig/bad:1"}})
		for _, p := range []struct {
			name string
			k    *ecdsa.PrivateKey
			img  *fixture.Image
		}{{"good", key, good}, {"bad", other, bad}} {
			writeArchive(t, filepath.Join(imagesDir, "zarf-package-"+p.name+"-amd64.tar.zst"), fixture.Zstd, fixture.CompressOptions{},
				func(ctx context.Context, w io.Writer) error {
					return fixture.WriteZarf(ctx, w, fixture.ZarfOptions{Name: p.name,
						SignYAML: func(b []byte) []byte { return sigtest.BlobBundle(t, p.k, b) }}, p.img)
				})
		}
		res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--policy", pol)
		if res.Code != 1 || !strings.Contains(res.Stderr, "image "+bad.Names[0]+" refused by the signature policy: unsigned") {
			t.Fatalf("sync exited %d, want 1 and %s refused\n%s", res.Code, bad.Names[0], res.Stderr)
		}
		d.requirePinned(t, good.Names[0])
		if _, ok := d.record(t, bad.Names[0]); ok {
			t.Errorf("%s refused, but containerd has a record of that name", bad.Names[0])
		}
		st := d.signatureStatus(t, dataDir, imagesDir, pol)
		seen := false
		for _, img := range st.Images {
			if img.Name != good.Names[0] {
				continue
			}
			seen = true
			if img.Signature == nil || img.Signature.State != "verified" || !strings.Contains(img.Signature.Reason, "Zarf package's signature") {
				t.Errorf("status: %s signature %+v, want verified by the package's signature", img.Name, img.Signature)
			}
		}
		if !seen {
			t.Errorf("status lists no %s", good.Names[0])
		}
	})
}

// TestSignaturePolicyKeyless: keyless signatures (a certificate from
// sigstore-go's test Fulcio, logged in its Rekor, timestamped), carried in
// the archive: under enforce, the image signed by the identity the policy
// trusts is pinned, verified by that identity; the one signed by another
// identity is refused, the reason naming who signed it.
func TestSignaturePolicyKeyless(t *testing.T) {
	const issuer = "https://issuer.example"
	vs := sigtest.NewVirtualSigstore(t)
	dir := tempDir(t)
	if err := os.WriteFile(filepath.Join(dir, "trusted_root.json"), sigtest.TrustedRoot(t, vs, true, false), 0o644); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte("mode: enforce\nrules:\n  - images: [\"e2e.local/keyless/*\"]\n    keyless:\n      trustedRoot: trusted_root.json\n"+
		"      identities:\n        - issuer: \""+issuer+"\"\n          subjectRegExp: \"^release@example\\\\.com$\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ours := build(t, fixture.ImageSpec{Names: []string{"e2e.local/keyless/ours:1"}})
	theirs := build(t, fixture.ImageSpec{Names: []string{"e2e.local/keyless/theirs:1"}})
	sig := func(img *fixture.Image, subject string) fixture.Artifact {
		repo, _, _ := strings.Cut(img.Names[0], ":")
		m := sigtest.LegacyKeyless(t, vs, repo, img.Target.Digest, issuer, subject)
		desc := m.Descriptor
		desc.Annotations = map[string]string{ocispec.AnnotationRefName: repo + ":" + oci.SignatureTag(img.Target.Digest)}
		return fixture.Artifact{Descriptor: desc, Blobs: m.Bytes()}
	}
	archive := filepath.Join(dir, "keyless.tar")
	writeArchive(t, archive, fixture.None, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameOCIFull,
			Artifacts: []fixture.Artifact{sig(ours, "release@example.com"), sig(theirs, "someone@else.example")}}, ours, theirs)
	})
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		res := holdfast(t, "import", "--address", d.Address, "--data-dir", filepath.Join(tempDir(t), "data"), "--policy", pol, archive)
		if res.Code != 1 {
			t.Fatalf("import exited %d, want 1\n%s%s", res.Code, res.Stdout, res.Stderr)
		}
		if want := ours.Names[0] + ": signature: verified by " + issuer + " release@example.com"; !strings.Contains(res.Stdout, want) {
			t.Errorf("import does not say %q:\n%s", want, res.Stdout)
		}
		if want := "image " + theirs.Names[0] + " refused by the signature policy: invalid"; !strings.Contains(res.Stderr, want) ||
			!strings.Contains(res.Stderr, "signed by "+issuer+" someone@else.example, which is no trusted identity") {
			t.Errorf("import's errors do not say %q and who signed:\n%s", want, res.Stderr)
		}
		d.requirePinned(t, ours.Names[0])
		if _, ok := d.record(t, theirs.Names[0]); ok {
			t.Errorf("%s refused, but containerd has a record of that name", theirs.Names[0])
		}
	})
}

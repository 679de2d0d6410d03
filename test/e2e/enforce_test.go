package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/signature"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
)

// writeTagPolicy writes a policy whose rules name the scene's images by
// their tags (and late:v*, a tag pattern), in mode.
func (s signedScene) writeTagPolicy(t *testing.T, mode string) string {
	t.Helper()
	p := filepath.Join(s.policyDir, "policy.yaml")
	body := "mode: " + mode + "\nrules:\n  - images: [\"" + s.signed + "\", \"" + s.foreign + "\", \"" + s.bare + "\", \"e2e.local/sig/late:v*\"]\n    keys: [platform.pub]\n"
	if err := os.WriteFile(p+".tmp", []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		t.Fatal(err)
	}
	return p
}

// digestName is name's repo@digest name at target.
func digestName(name string, target digest.Digest) string {
	repo, _, _ := strings.Cut(name, ":")
	return repo + "@" + target.String()
}

// TestEnforceNamesNoRefusedImage: under enforce no name of an image the
// policy refuses exists, tag or digest, whichever path brought it:
//   - rules written for tags refuse the digest names holdfast makes too;
//   - warn → enforce deletes the records holdfast had made of the refused
//     images (not only their pins), and so does a key taken out of the
//     policy for the image it had verified;
//   - what verify refuses has no record; what it accepts is pinned.
func TestEnforceNamesNoRefusedImage(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		s := writeSignedScene(t, imagesDir)
		pol := s.writeTagPolicy(t, "warn")
		a := startAgent(t, d, dataDir, []string{imagesDir}, "--policy", pol, "--resync", "2s")
		names := map[string]string{} // tag → digest name
		eventually(t, "every image and its digest name pinned under warn", func() bool {
			for _, n := range []string{s.signed, s.foreign, s.bare} {
				rec, ok := d.record(t, n)
				if !ok || !d.isPinned(t, n) {
					return false
				}
				names[n] = digestName(n, rec.Target.Digest)
				if !d.isPinned(t, names[n]) {
					return false
				}
			}
			return true
		})

		s.writeTagPolicy(t, "enforce")
		eventually(t, "no name of the refused images under enforce", func() bool {
			for _, n := range []string{s.foreign, names[s.foreign], s.bare, names[s.bare]} {
				if _, ok := d.record(t, n); ok {
					return false
				}
			}
			return d.isPinned(t, s.signed) && d.isPinned(t, names[s.signed])
		})
		for _, n := range []string{s.foreign, names[s.foreign], s.bare, names[s.bare]} {
			if found, _ := d.criImage(t, n); found {
				t.Errorf("%s refused, but the CRI resolves it", n)
			}
		}

		// verify and the store agree.
		res := holdfast(t, "verify", "--policy", pol, "-o", "json", s.archive)
		var v struct {
			Images []struct{ Name, State string } `json:"images"`
		}
		if err := json.Unmarshal([]byte(res.Stdout), &v); err != nil || len(v.Images) == 0 {
			t.Fatalf("verify -o json: %v\n%s%s", err, res.Stdout, res.Stderr)
		}
		for _, img := range v.Images {
			_, named := d.record(t, img.Name)
			switch img.State {
			case "verified", "unchecked":
				if !d.isPinned(t, img.Name) {
					t.Errorf("verify accepts %s (%s), but it is not pinned", img.Name, img.State)
				}
			default:
				if named {
					t.Errorf("verify refuses %s (%s), but containerd has a record of that name", img.Name, img.State)
				}
			}
		}

		// The key taken out: the image it verified loses every name.
		if err := os.WriteFile(filepath.Join(s.policyDir, "platform.pub"), sigtest.PublicPEM(t, sigtest.NewKey(t)), 0o644); err != nil {
			t.Fatal(err)
		}
		eventually(t, "no name of the image whose key was taken out", func() bool {
			_, tag := d.record(t, s.signed)
			_, byDigest := d.record(t, names[s.signed])
			return !tag && !byDigest
		})
		a.stop(t)
	})
}

// TestPolicyInForceInTheNamespace: holdfast run --policy puts its policy in
// force in the namespace: a holdfast import beside the agent, with no
// --policy and another data dir, judges by it and names no refused image;
// one with another --policy is refused; status without --policy shows the
// agent's verdicts.
func TestPolicyInForceInTheNamespace(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		s := writeSignedScene(t, imagesDir)
		pol := s.writeTagPolicy(t, "enforce")
		a := startAgent(t, d, dataDir, []string{imagesDir}, "--policy", pol, "--resync", "2s")
		eventually(t, "the signed image pinned", func() bool { return d.isPinned(t, s.signed) })

		// holdfast import beside the agent, as another data dir would run it.
		late := build(t, fixture.ImageSpec{Names: []string{"e2e.local/sig/late:v1"}})
		lateArchive := filepath.Join(dir, "carried", "late.tar")
		writeArchive(t, lateArchive, fixture.None, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
			return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameOCIFull}, late)
		})
		res := holdfast(t, "import", "--address", d.Address, "--data-dir", filepath.Join(dir, "other"), lateArchive)
		if res.Code != 1 || !strings.Contains(res.Stderr, "image "+late.Names[0]+" refused by the signature policy: unsigned") {
			t.Errorf("import beside an enforcing agent exited %d, want 1 refusing %s\n%s%s", res.Code, late.Names[0], res.Stdout, res.Stderr)
		}
		for _, n := range []string{late.Names[0], digestName(late.Names[0], late.Target.Digest)} {
			if _, ok := d.record(t, n); ok {
				t.Errorf("import named %s, which the policy in force refuses", n)
			}
		}
		permissive := filepath.Join(dir, "permissive.yaml")
		if err := os.WriteFile(permissive, []byte("mode: warn\nrules:\n  - images: [\"*\"]\n    keys: ["+filepath.Join(s.policyDir, "platform.pub")+"]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		res = holdfast(t, "import", "--address", d.Address, "--data-dir", filepath.Join(dir, "other"), "--policy", permissive, lateArchive)
		if res.Code != 2 || !strings.Contains(res.Stderr, "must judge by it") {
			t.Errorf("import with another policy than the one in force exited %d, want 2\n%s", res.Code, res.Stderr)
		}
		if _, ok := d.record(t, late.Names[0]); ok {
			t.Errorf("import with another --policy named %s", late.Names[0])
		}

		// status without --policy: the agent's verdicts.
		var st struct {
			signatureStatus
			Policy struct{ Path, Mode, InForceBy string } `json:"policy"`
		}
		readStatus(t, &st, "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir)
		if st.Policy.Path != pol || st.Policy.Mode != "enforce" || !strings.Contains(st.Policy.InForceBy, dataDir) {
			t.Errorf("status without --policy: policy %+v, want %s in force by the agent of %s", st.Policy, pol, dataDir)
		}
		verified := false
		for _, img := range st.Images {
			if img.Name == s.signed && img.Signature != nil && img.Signature.State == "verified" {
				verified = true
			}
		}
		refused := map[string]string{}
		for _, r := range st.Refused {
			refused[r.Name] = r.Signature.State
		}
		if !verified || refused[s.foreign] != "invalid" || refused[s.bare] != "unsigned" {
			t.Errorf("status without --policy: %s verified %v, refused %v", s.signed, verified, refused)
		}

		a.stop(t)
	})
}

// TestKeptBeforeSignaturesWereKept: a kept source whose state was written by
// a holdfast that kept no signatures, its archive deleted, is refused under
// enforce with a reason that says what to do, though verify of the archive
// had found it signed.
func TestKeptBeforeSignaturesWereKept(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		dataDir := filepath.Join(dir, "data")
		s := writeSignedScene(t, filepath.Join(dir, "carried"))
		pol := s.writePolicy(t, "enforce")
		if res := holdfast(t, "verify", "--policy", pol, s.archive); !strings.Contains(res.Stdout, "verified") {
			t.Fatalf("verify does not find %s signed:\n%s%s", s.signed, res.Stdout, res.Stderr)
		}
		if res := holdfast(t, "import", "--address", d.Address, "--data-dir", dataDir, s.archive); res.Code != 0 {
			t.Fatalf("import exited %d\n%s", res.Code, res.Stderr)
		}
		l, ok := d.keepLeaseOf(t, s.archive)
		if !ok {
			t.Fatal("no kept lease")
		}
		d.forgetSignatures(t, l.ID)
		if err := os.Remove(s.archive); err != nil {
			t.Fatal(err)
		}
		res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--policy", pol)
		want := "image " + s.signed + " refused by the signature policy: unsigned: rule " + pol + ":3: " + signature.ImportedBeforeSignatures
		if res.Code != 1 || !strings.Contains(res.Stderr, want) {
			t.Errorf("sync exited %d, want 1 saying %q\n%s", res.Code, want, res.Stderr)
		}
		if n := strings.Count(res.Stderr, "was imported by a holdfast that did not keep signatures"); n != 1 {
			t.Errorf("the warning is said %d times, want once:\n%s", n, res.Stderr)
		}
		st := d.signatureStatus(t, dataDir, filepath.Join(dir, "images"), pol)
		said := false
		for _, r := range st.Refused {
			if r.Name == s.signed && strings.HasSuffix(r.Signature.Reason, signature.ImportedBeforeSignatures) {
				said = true
			}
		}
		if !said {
			t.Errorf("status does not say %s was imported before signatures were kept: %+v", s.signed, st.Refused)
		}
	})
}

// forgetSignatures writes the state of lease as a holdfast that kept no
// signatures wrote it: without "signatures" and "signaturesRecorded".
func (d *daemon) forgetSignatures(t *testing.T, lease string) {
	t.Helper()
	raw := d.newestState(t, lease)
	var st map[string]any
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	if _, ok := st["signaturesRecorded"]; !ok {
		t.Fatalf("the state of %s records no signatures to forget: %s", lease, raw)
	}
	delete(st, "signatures")
	delete(st, "signaturesRecorded")
	d.writeState(t, lease, "e2e-old-state-", st)
}

// newestState is the newest state blob of lease.
func (d *daemon) newestState(t *testing.T, lease string) []byte {
	t.Helper()
	ctx := d.ctx()
	cs := d.Client.ContentStore()
	var newest content.Info
	if err := cs.Walk(ctx, func(info content.Info) error {
		if info.CreatedAt.After(newest.CreatedAt) {
			newest = info
		}
		return nil
	}, `labels."io.holdfast.state"==`+strconv.Quote(lease)); err != nil || newest.Digest == "" {
		t.Fatalf("finding the state of %s: %v", lease, err)
	}
	raw, err := content.ReadBlob(ctx, cs, ocispec.Descriptor{Digest: newest.Digest, Size: newest.Size})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// writeState writes st as the newest state of lease, under an ingest ref
// starting with ref.
func (d *daemon) writeState(t *testing.T, lease, ref string, st any) {
	t.Helper()
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	desc := ocispec.Descriptor{Digest: digest.FromBytes(raw), Size: int64(len(raw))}
	if err := content.WriteBlob(leases.WithLease(d.ctx(), lease), d.Client.ContentStore(), ref+lease, bytes.NewReader(raw), desc,
		content.WithLabels(map[string]string{"io.holdfast.state": lease})); err != nil {
		t.Fatal(err)
	}
}

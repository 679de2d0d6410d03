package cli_test

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/cli"
	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
)

// The repository of the images verify is given.
const verifyRepo = "registry.example/team/"

// signedSet is three images and their signatures: signed by the key the
// policies trust, signed by another key, and not signed at all.
type signedSet struct {
	dir                   string
	trusted, other        *ecdsa.PrivateKey
	keyPath               string // the trusted key's cosign.pub
	signed, forged, plain *fixture.Image
	sigs                  map[*fixture.Image]sigtest.Manifest // the signed ones'
}

func newSignedSet(t *testing.T) *signedSet {
	t.Helper()
	s := &signedSet{dir: t.TempDir(), trusted: sigtest.NewKey(t), other: sigtest.NewKey(t), sigs: map[*fixture.Image]sigtest.Manifest{}}
	s.keyPath = filepath.Join(s.dir, "cosign.pub")
	writeFile(t, s.keyPath, string(sigtest.PublicPEM(t, s.trusted)))
	build := func(name string, seed int64) *fixture.Image {
		img, err := fixture.Build(context.Background(), fixture.ImageSpec{Names: []string{verifyRepo + name + ":1"},
			Layers: fixture.UniformLayers(1, 2<<10, false, seed)})
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	s.signed, s.forged, s.plain = build("signed", 1), build("forged", 2), build("plain", 3)
	s.sigs[s.signed] = sigtest.Legacy(t, verifyRepo+"signed", s.signed.Target.Digest, s.trusted)
	s.sigs[s.forged] = sigtest.Legacy(t, verifyRepo+"forged", s.forged.Target.Digest, s.other)
	return s
}

func (s *signedSet) images() []*fixture.Image { return []*fixture.Image{s.signed, s.forged, s.plain} }

// sigTag is the name cosign gives img's signature: <repo>:sha256-<hex>.sig.
func sigTag(img *fixture.Image) string {
	repo, _, _ := strings.Cut(img.Names[0], ":")
	return repo + ":" + oci.SignatureTag(img.Target.Digest)
}

// writeOCI writes the images as an OCI archive at path, each signature
// beside its image, tagged as cosign tags it.
func (s *signedSet) writeOCI(t *testing.T, path string, opts fixture.OCIOptions) string {
	t.Helper()
	for _, img := range s.images() {
		if m, ok := s.sigs[img]; ok {
			d := m.Descriptor
			d.Annotations = map[string]string{ocispec.AnnotationRefName: sigTag(img)}
			opts.Artifacts = append(opts.Artifacts, fixture.Artifact{Descriptor: d, Blobs: m.Bytes()})
		}
	}
	writeArchive(t, path, func(w io.Writer) error {
		return fixture.WriteOCI(context.Background(), w, opts, s.images()...)
	})
	return path
}

// writeHaul writes the images as a haul (zstd) at path, each signature an
// entry of kind sigs under its image's names, as Hauler stores it.
func (s *signedSet) writeHaul(t *testing.T, path string) string {
	t.Helper()
	var opts fixture.HaulOptions
	for _, img := range s.images() {
		if m, ok := s.sigs[img]; ok {
			d := m.Descriptor
			d.Annotations = map[string]string{
				fixture.AnnotationKind:      "dev.hauler/sigs",
				fixture.AnnotationImageName: img.Names[0],
				ocispec.AnnotationRefName:   strings.TrimPrefix(img.Names[0], "registry.example/"),
			}
			opts.Artifacts = append(opts.Artifacts, fixture.Artifact{Descriptor: d, Blobs: m.Bytes()})
		}
	}
	writeArchive(t, path, func(w io.Writer) error {
		zw, err := fixture.Compress(w, fixture.Zstd, fixture.CompressOptions{})
		if err != nil {
			return err
		}
		if err := fixture.WriteHaul(context.Background(), zw, opts, s.images()...); err != nil {
			return err
		}
		return zw.Close()
	})
	return path
}

func writeArchive(t *testing.T, path string, write func(io.Writer) error) {
	t.Helper()
	if err := fixture.WriteFileAtomic(path, write); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// policy writes a policy file whose one rule trusts the set's key for
// images matching pattern, and returns its path.
func (s *signedSet) policy(t *testing.T, mode, pattern string) string {
	t.Helper()
	p := filepath.Join(s.dir, "policy-"+mode+".yaml")
	writeFile(t, p, "mode: "+mode+"\nrules:\n  - images: [\""+pattern+"\"]\n    keys: [cosign.pub]\n")
	return p
}

// verifyJSON runs holdfast verify -o json and returns its images by name.
func verifyJSON(t *testing.T, args ...string) (map[string]cli.VerifyImage, string, int) {
	t.Helper()
	out, errOut, code := holdfast(t, append([]string{"verify", "-o", "json"}, args...)...)
	var doc struct {
		Images []cli.VerifyImage `json:"images"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("verify -o json printed %q (stderr %q): %v", out, errOut, err)
	}
	if doc.Images == nil {
		t.Fatalf("verify -o json printed %q: no images list", out)
	}
	byName := map[string]cli.VerifyImage{}
	for _, img := range doc.Images {
		if _, dup := byName[img.Name]; dup {
			t.Errorf("%s listed twice", img.Name)
		}
		byName[img.Name] = img
	}
	return byName, errOut, code
}

// wantVerdict checks one image's line.
func wantVerdict(t *testing.T, got map[string]cli.VerifyImage, img *fixture.Image, path, state, by, reason string) {
	t.Helper()
	v, ok := got[img.Names[0]]
	if !ok {
		t.Errorf("%s not listed; got %v", img.Names[0], got)
		return
	}
	if v.Path != path || v.Digest != img.Target.Digest.String() || string(v.State) != state || v.By != by || !strings.Contains(v.Reason, reason) {
		t.Errorf("%s: got %+v, want path %s, digest %s, state %s, by %q, reason containing %q", img.Names[0], v, path, img.Target.Digest, state, by, reason)
	}
}

// TestVerifySigned: of an OCI archive and a haul each holding an image
// signed by the trusted key, one signed by another key and one unsigned,
// verify finds the first verified by the key, the second invalid and the
// third unsigned, and exits 1; the signatures themselves are no images; the
// table and the JSON say the same.
func TestVerifySigned(t *testing.T) {
	s := newSignedSet(t)
	pol := s.policy(t, "enforce", verifyRepo+"*")
	for _, tc := range []struct {
		name string
		path string
	}{
		{"oci", s.writeOCI(t, filepath.Join(s.dir, "images.tar"), fixture.OCIOptions{})},
		{"haul", s.writeHaul(t, filepath.Join(s.dir, "haul.tar.zst"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, errOut, code := verifyJSON(t, "--policy", pol, tc.path)
			if code != 1 || strings.Contains(errOut, "error:") {
				t.Errorf("exit %d, stderr %q; want 1 and no error", code, errOut)
			}
			if len(got) != 3 {
				t.Errorf("%d images listed, want 3: %v", len(got), got)
			}
			rule := "rule " + pol + ":3"
			wantVerdict(t, got, s.signed, tc.path, "verified", s.keyPath, rule)
			wantVerdict(t, got, s.forged, tc.path, "invalid", "", rule+": simplesigning signature ")
			wantVerdict(t, got, s.forged, tc.path, "invalid", "", "no trusted key verifies it")
			wantVerdict(t, got, s.plain, tc.path, "unsigned", "", rule+": no signature found")

			out, _, code := holdfast(t, "verify", "--policy", pol, tc.path)
			if code != 1 {
				t.Errorf("table: exit %d, want 1", code)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 4 || !strings.HasPrefix(lines[0], "PATH") {
				t.Fatalf("table:\n%s\nwant a header and 3 lines", out)
			}
			for _, want := range []struct {
				fields []string
				reason string
			}{
				{[]string{tc.path, s.forged.Names[0], s.forged.Target.Digest.Encoded()[:12], "invalid", "-"}, rule + ": simplesigning signature "},
				{[]string{tc.path, s.plain.Names[0], s.plain.Target.Digest.Encoded()[:12], "unsigned", "-"}, rule + ": no signature found"},
				{[]string{tc.path, s.signed.Names[0], s.signed.Target.Digest.Encoded()[:12], "verified", s.keyPath}, rule},
			} {
				if !slices.ContainsFunc(lines[1:], func(l string) bool {
					f := strings.Fields(l)
					return len(f) > len(want.fields) && slices.Equal(f[:len(want.fields)], want.fields) && strings.Contains(l, want.reason)
				}) {
					t.Errorf("table:\n%s\nhas no line %q, reason %q", out, want.fields, want.reason)
				}
			}
			if strings.Contains(out, ".sig") {
				t.Errorf("a signature is listed as an image:\n%s", out)
			}
		})
	}
}

// TestVerifyWarnMode: the policy's mode does not change the verdicts or the
// exit status.
func TestVerifyWarnMode(t *testing.T) {
	s := newSignedSet(t)
	path := s.writeOCI(t, filepath.Join(s.dir, "images.tar"), fixture.OCIOptions{})
	got, _, code := verifyJSON(t, "--policy", s.policy(t, "warn", verifyRepo+"*"), path)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantVerdict(t, got, s.plain, path, "unsigned", "", "no signature found")
}

// TestVerifyUnchecked: images no rule matches are unchecked and pass: a
// policy whose rule matches the verified image alone, and one whose rule
// matches none, exit 0.
func TestVerifyUnchecked(t *testing.T) {
	s := newSignedSet(t)
	path := s.writeOCI(t, filepath.Join(s.dir, "images.tar"), fixture.OCIOptions{})

	got, errOut, code := verifyJSON(t, "--policy", s.policy(t, "enforce", s.signed.Names[0]), path)
	if code != 0 || errOut != "" {
		t.Errorf("rule for the signed image: exit %d, stderr %q; want 0 and nothing", code, errOut)
	}
	wantVerdict(t, got, s.signed, path, "verified", s.keyPath, "")
	wantVerdict(t, got, s.forged, path, "unchecked", "", "no rule matches")
	wantVerdict(t, got, s.plain, path, "unchecked", "", "no rule matches")

	got, _, code = verifyJSON(t, "--policy", s.policy(t, "warn", "other.example/*"), path)
	if code != 0 {
		t.Errorf("rule for other images: exit %d, want 0", code)
	}
	for _, img := range s.images() {
		wantVerdict(t, got, img, path, "unchecked", "", "no rule matches")
	}
}

// TestVerifyBadPolicy: a policy with mistakes is exit 2, each mistake
// printed as FILE:LINE: cause, and no archive is read.
func TestVerifyBadPolicy(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	writeFile(t, pol, "mode: strict\nrules:\n  - images: [\"*\"]\n    keys: [missing.pub]\n")
	out, errOut, code := holdfast(t, "verify", "--policy", pol, filepath.Join(dir, "nothing.tar"))
	if code != 2 || out != "" {
		t.Errorf("exit %d, stdout %q; want 2 and nothing", code, out)
	}
	for _, want := range []string{"error: " + pol + ":1: mode \"strict\"", "error: " + pol + ":4: "} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q does not say %q", errOut, want)
		}
	}
	if strings.Contains(errOut, "nothing.tar") {
		t.Errorf("stderr %q: the archive was read", errOut)
	}

	_, errOut, code = holdfast(t, "verify", "--policy", filepath.Join(dir, "absent.yaml"), filepath.Join(dir, "nothing.tar"))
	if code != 2 || !strings.Contains(errOut, "error: reading "+filepath.Join(dir, "absent.yaml")) {
		t.Errorf("a policy that is not there: exit %d, stderr %q", code, errOut)
	}
}

// TestVerifyLooseKey: a user other than root rewrote the policy's key, a
// file writable by others (mode 0666) in a directory writable by others,
// with a key of their own that signed their image: verify refuses the
// policy (exit 2, the key file and its mode named at the policy's line) and
// reads no archive, rather than finding the image verified by the key.
// --insecure-perms reads the key all the same.
func TestVerifyLooseKey(t *testing.T) {
	s := newSignedSet(t)
	path := s.writeOCI(t, filepath.Join(s.dir, "images.tar"), fixture.OCIOptions{})
	keys := filepath.Join(s.dir, "keys")
	if err := os.Mkdir(keys, 0o755); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(keys, "k1.pub")
	writeFile(t, key, string(sigtest.PublicPEM(t, s.other))) // the forger's
	for p, mode := range map[string]os.FileMode{keys: 0o777, key: 0o666} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	pol := filepath.Join(s.dir, "policy.yaml")
	writeFile(t, pol, "mode: enforce\nrules:\n  - images: [\""+s.forged.Names[0]+"\"]\n    keys: [keys/k1.pub]\n")

	out, errOut, code := holdfast(t, "verify", "--policy", pol, path)
	want := "error: " + pol + ":4: key " + key + " is writable by others (mode 0666); fix the mode or owner, or pass --insecure-perms"
	if code != 2 || out != "" || !strings.Contains(errOut, want) {
		t.Errorf("exit %d, stdout %q, stderr %q; want 2, nothing, and %q", code, out, errOut, want)
	}

	got, _, code := verifyJSON(t, "--insecure-perms", "--policy", pol, path)
	if code != 0 {
		t.Errorf("--insecure-perms: exit %d, want 0", code)
	}
	wantVerdict(t, got, s.forged, path, "verified", key, "")
}

// TestPolicyLooseKeyEveryCommand: every command that takes --policy refuses
// a policy whose key others may write, as a bad policy (exit 2, the key
// file and its mode named), before it reaches containerd.
func TestPolicyLooseKeyEveryCommand(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "k1.pub")
	writeFile(t, key, string(sigtest.PublicPEM(t, sigtest.NewKey(t))))
	if err := os.Chmod(key, 0o666); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "policy.yaml")
	writeFile(t, pol, "mode: enforce\nrules:\n  - images: [\"*\"]\n    keys: [k1.pub]\n")
	want := pol + ":4: key " + key + " is writable by others (mode 0666)"
	for _, args := range [][]string{
		{"sync"}, {"run"}, {"plan"}, {"status"}, {"import", filepath.Join(dir, "a.tar")}, {"verify", filepath.Join(dir, "a.tar")},
	} {
		args = append(args, "--data-dir", filepath.Join(dir, "data"), "--address", filepath.Join(dir, "none.sock"), "--policy", pol)
		if _, errOut, code := holdfast(t, args...); code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", args, code, errOut, want)
		}
	}
}

// TestVerifyUsage: no --policy, no path, --name with two paths, a bad -o
// are usage errors; HOLDFAST_POLICY gives the policy.
func TestVerifyUsage(t *testing.T) {
	s := newSignedSet(t)
	path := s.writeOCI(t, filepath.Join(s.dir, "images.tar"), fixture.OCIOptions{})
	pol := s.policy(t, "enforce", s.signed.Names[0])
	for _, args := range [][]string{
		{"verify", path},
		{"verify", "--policy", pol},
		{"verify", "--policy", pol, "--name", "x:1", path, path},
		{"verify", "--policy", pol, "-o", "yaml", path},
	} {
		if _, errOut, code := holdfast(t, args...); code != 2 {
			t.Errorf("%q: exit %d (stderr %q), want 2", args, code, errOut)
		}
	}
	t.Setenv("HOLDFAST_POLICY", pol)
	if _, errOut, code := holdfast(t, "verify", path); code != 0 {
		t.Errorf("policy from HOLDFAST_POLICY: exit %d (stderr %q), want 0", code, errOut)
	}
}

// TestVerifyUnreadable: a path that cannot be read beside one that can is
// exit 1, its error printed, and the other still checked.
func TestVerifyUnreadable(t *testing.T) {
	s := newSignedSet(t)
	good := s.writeOCI(t, filepath.Join(s.dir, "images.tar"), fixture.OCIOptions{})
	junk := filepath.Join(s.dir, "junk.tar")
	writeFile(t, junk, "not a tar archive at all")
	missing := filepath.Join(s.dir, "missing.tar")
	pol := s.policy(t, "enforce", s.signed.Names[0])

	got, errOut, code := verifyJSON(t, "--policy", pol, junk, good, missing)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, p := range []string{junk, missing} {
		if !strings.Contains(errOut, "error: verify "+p+": ") {
			t.Errorf("stderr %q does not report %s", errOut, p)
		}
	}
	if strings.Contains(errOut, good) {
		t.Errorf("stderr %q reports the good archive", errOut)
	}
	wantVerdict(t, got, s.signed, good, "verified", s.keyPath, "")
	wantVerdict(t, got, s.plain, good, "unchecked", "", "")
}

// TestVerifyDigests: a blob whose content does not match its digest fails
// the archive, although nothing is kept of it.
func TestVerifyDigests(t *testing.T) {
	s := newSignedSet(t)
	path := filepath.Join(s.dir, "images.tar")
	s.writeOCI(t, path, fixture.OCIOptions{})
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Flip a byte inside the signed image's layer.
	layer := s.signed.Manifests[0].Layers[0]
	var blob strings.Builder
	if err := layer.WriteBlob(context.Background(), &blob); err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), blob.String())
	if i < 0 {
		t.Fatal("layer not found in the archive")
	}
	b[i+len(blob.String())/2] ^= 0xff
	writeFile(t, path, string(b))
	_, errOut, code := holdfast(t, "verify", "--policy", s.policy(t, "enforce", "*"), path)
	if code != 1 || !strings.Contains(errOut, "error: verify "+path+": ") || !strings.Contains(errOut, "digest") {
		t.Errorf("exit %d, stderr %q; want 1 and an error about the digest", code, errOut)
	}
}

// TestVerifyUnreadableSignature: a signature whose layer the archive lacks
// cannot be read, and the verdict says so.
func TestVerifyUnreadableSignature(t *testing.T) {
	s := newSignedSet(t)
	var layer digest.Digest
	for d, b := range s.sigs[s.signed].Blobs {
		if strings.Contains(string(b), "docker-manifest-digest") {
			layer = d
		}
	}
	path := s.writeOCI(t, filepath.Join(s.dir, "images.tar"), fixture.OCIOptions{OmitBlobs: []digest.Digest{layer}})
	got, _, code := verifyJSON(t, "--policy", s.policy(t, "enforce", s.signed.Names[0]), path)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantVerdict(t, got, s.signed, path, "invalid", "", "a candidate signature cannot be read: ")
	wantVerdict(t, got, s.signed, path, "invalid", "", "blob "+layer.String()+": not in the archive")
}

// TestVerifySplitHaul: a split haul is checked whole, given by one of its
// parts, and named by the bundle's name.
func TestVerifySplitHaul(t *testing.T) {
	s := newSignedSet(t)
	path := s.writeHaul(t, filepath.Join(s.dir, "haul.tar.zst"))
	parts, err := fixture.SplitHauler(path, 4<<10)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 2 {
		t.Fatalf("%d parts", len(parts))
	}
	got, _, code := verifyJSON(t, "--policy", s.policy(t, "enforce", s.signed.Names[0]), parts[1])
	if code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	wantVerdict(t, got, s.signed, path, "verified", s.keyPath, "")
}

// TestVerifyCosignLayout: a cosign save layout directory's signatures are
// read (its index skips them): the fixture's dummy signature is found, and
// does not verify.
func TestVerifyCosignLayout(t *testing.T) {
	s := newSignedSet(t)
	dir := filepath.Join(s.dir, "layout")
	if err := fixture.WriteCosignDir(context.Background(), dir, s.signed, true); err != nil {
		t.Fatal(err)
	}
	pol := s.policy(t, "enforce", s.signed.Names[0])
	got, _, code := verifyJSON(t, "--policy", pol, "--name", s.signed.Names[0], dir)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantVerdict(t, got, s.signed, dir, "invalid", "", "no trusted key verifies it")
}

// TestVerifyZarf: a Zarf package's <repo>:sha256-<hex>.sig images are found
// as its images' signatures: the fixture's dummy signature does not verify.
func TestVerifyZarf(t *testing.T) {
	s := newSignedSet(t)
	path := filepath.Join(s.dir, "zarf-package-demo-amd64.tar.zst")
	writeArchive(t, path, func(w io.Writer) error {
		zw, err := fixture.Compress(w, fixture.Zstd, fixture.CompressOptions{})
		if err != nil {
			return err
		}
		if err := fixture.WriteZarf(context.Background(), zw, fixture.ZarfOptions{Signatures: true}, s.signed); err != nil {
			return err
		}
		return zw.Close()
	})
	got, _, code := verifyJSON(t, "--policy", s.policy(t, "enforce", verifyRepo+"*"), path)
	if code != 1 || len(got) != 1 {
		t.Errorf("exit %d, images %v; want 1 and one image", code, got)
	}
	wantVerdict(t, got, s.signed, path, "invalid", "", "no trusted key verifies it")
}

// TestVerifyGenerated: the images fixture.Generate writes with Count and
// Sign (tools/imagegen -images N -sign-key) are each verified by the key.
func TestVerifyGenerated(t *testing.T) {
	s := newSignedSet(t)
	path := filepath.Join(s.dir, "generated.tar")
	const n = 3
	err := fixture.Generate(context.Background(), fixture.GenerateConfig{
		Output: path, Format: fixture.FormatOCI, Count: n,
		Image: fixture.ImageSpec{Names: []string{verifyRepo + "gen:1"}, Layers: fixture.UniformLayers(1, 512, false, 1)},
		Sign:  func(p []byte) (string, error) { return sigtest.Sign(t, s.trusted, p), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	got, errOut, code := verifyJSON(t, "--policy", s.policy(t, "enforce", verifyRepo+"*"), path)
	if code != 0 || len(got) != n {
		t.Fatalf("exit %d, %d images (stderr %q): %v; want 0 and %d", code, len(got), errOut, got, n)
	}
	digests := map[string]bool{}
	for i := 1; i <= n; i++ {
		v, ok := got[fmt.Sprintf("%sgen-%d:1", verifyRepo, i)]
		if !ok || v.State != "verified" || v.By != s.keyPath {
			t.Errorf("image %d: %+v, want verified by %s", i, v, s.keyPath)
		}
		digests[v.Digest] = true
	}
	if len(digests) != n {
		t.Errorf("%d digests among %d images", len(digests), n)
	}
}

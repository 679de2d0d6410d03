package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log"
	"maps"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"go.yaml.in/yaml/v3"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// releaseVersion is the VERSION the test releases; its files are named
// with releaseV.
const (
	releaseVersion = "v9.9.9-e2e"
	releaseV       = "9.9.9-e2e"
)

// releaseTools are the commands make release runs besides go: helm and
// cosign v3, and cyclonedx-gomod for tools/sbom (make deps builds them
// into bin/).
func releaseTools(t *testing.T) (helm, cosign string) {
	t.Helper()
	cosign = cosign3Bin(t)
	helm = filepath.Join(repoRoot(), "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		var lerr error
		if helm, lerr = exec.LookPath("helm"); lerr != nil {
			testenv.Missing(t, "cluster", "helm is neither in bin/ nor on PATH (make deps-helm builds it)")
		}
	}
	if _, err := exec.LookPath("cyclonedx-gomod"); err != nil {
		if _, err := os.Stat(filepath.Join(repoRoot(), "bin", "cyclonedx-gomod")); err != nil {
			testenv.Missing(t, "sbom", "cyclonedx-gomod is neither on PATH nor in bin/ (make deps-sbom builds it): tools/sbom makes the release's SBOMs with it")
		}
	}
	return helm, cosign
}

// makeRelease runs make release in the repository into dir/dist, its
// binaries and image (both architectures) into dir/bin, with env added to
// the environment and args given to make. It returns
// make's output and whether it succeeded.
func makeRelease(t *testing.T, dir string, env []string, args ...string) (string, bool) {
	t.Helper()
	helm, cosign := releaseTools(t)
	cmd := exec.Command("make", append([]string{"--no-print-directory", "release", "VERSION=" + releaseVersion, "IMAGE_ARCHES=amd64 arm64",
		"BIN=" + filepath.Join(dir, "bin"), "DIST=" + filepath.Join(dir, "dist"), "HELM=" + helm, "COSIGN3=" + cosign}, args...)...)
	cmd.Dir = repoRoot()
	// Nothing of a make that runs the suite (make test: its flags and
	// command-line variables), and no key or switch but the test's.
	unset := []string{"MAKEFLAGS=", "MFLAGS=", "MAKELEVEL=", "HOLDFAST_RELEASE_KEY=", "RELEASE_KEY=", "UNSIGNED=", "COSIGN_PASSWORD="}
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(e string) bool {
		return slices.ContainsFunc(unset, func(p string) bool { return strings.HasPrefix(e, p) })
	}), append([]string{"COSIGN_PASSWORD="}, env...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// TestMakeRelease: make release with a key the test generates, twice (the key
// given as a file, then as its PEM in the environment), into temp dirs.
// The first dist holds every file the release names, sha256sum -c
// SHA256SUMS passes; holdfast verify of the image archive under a policy
// with the release's public key says verified, and so does it for each
// architecture's manifest alone (each signed on its own); cosign v3 verifies
// the image and its platform manifests (pushed with their referrers to a
// registry) and the chart and SHA256SUMS as blobs, offline; the SBOM
// referrer is no image to verify or import (skipped as a referrer, no
// record of it); the SBOM names the containerd, client-go and sigstore-go
// versions go version -m reads in the amd64 holdfast binary; the chart
// holds the image's digest; the Hauler and Zarf files name the image by
// digest and the chart. The two dists differ only in the signatures. No key
// is refused; an unsigned release names its files -unsigned.
func TestMakeRelease(t *testing.T) {
	releaseTools(t)
	dir := tempDir(t)
	cosign3(t, dir, "generate-key-pair", "--output-key-prefix", "release")
	key := filepath.Join(dir, "release.key")

	if out, ok := makeRelease(t, filepath.Join(dir, "nokey"), nil); ok || !strings.Contains(out, "RELEASE_KEY") || !strings.Contains(out, "HOLDFAST_RELEASE_KEY") {
		t.Errorf("make release without a key: succeeded %v, want a refusal naming RELEASE_KEY and HOLDFAST_RELEASE_KEY:\n%s", ok, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "nokey", "dist")); err == nil {
		t.Errorf("make release without a key wrote %s", filepath.Join(dir, "nokey", "dist"))
	}

	start := time.Now()
	one := filepath.Join(dir, "one")
	if out, ok := makeRelease(t, one, nil, "RELEASE_KEY="+key); !ok {
		t.Fatalf("make release RELEASE_KEY=%s failed:\n%s", key, out)
	}
	t.Logf("make release (both architectures): %s", time.Since(start).Round(time.Second))
	pem, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	two := filepath.Join(dir, "two")
	if out, ok := makeRelease(t, two, []string{"HOLDFAST_RELEASE_KEY=" + string(pem)}); !ok {
		t.Fatalf("make release with HOLDFAST_RELEASE_KEY failed:\n%s", out)
	}
	t.Logf("two make release runs: %s", time.Since(start).Round(time.Second))

	dist := filepath.Join(one, "dist")
	rel := checkReleaseFiles(t, dist, "")
	checkReleaseSignatures(t, dir, dist, rel)
	checkReleaseSBOM(t, dist, rel, filepath.Join(one, "bin", "linux_amd64", "holdfast"))
	checkReleaseChart(t, dist, rel)
	checkReleaseBundles(t, dist, rel)
	checkReleaseImport(t, dist, rel)
	checkReleaseSame(t, dist, filepath.Join(two, "dist"), rel)
	checkReleaseUnsigned(t, one, dist, rel)
}

// release is what a test reads of a dist dir.
type release struct {
	image, chart string             // file names
	index        ocispec.Descriptor // the image's index.json entry
	referrers    []ocispec.Descriptor
	blobs        map[string][]byte // the archive's small entries (≤ 1 MiB), by name
	platforms    []ocispec.Descriptor
}

// checkReleaseFiles checks that dist holds the release's files (mark is
// -unsigned for an unsigned one), that sha256sum -c passes on its sums and
// that they list every other file, and reads the image archive.
func checkReleaseFiles(t *testing.T, dist, mark string) release {
	t.Helper()
	rel := release{image: "holdfast-image-" + releaseV + mark + ".tar", chart: "holdfast-" + releaseV + mark + ".tgz"}
	sums := "SHA256SUMS" + mark
	want := []string{"hauler-manifest.yaml", "zarf.yaml", rel.image, rel.chart}
	for _, arch := range []string{"amd64", "arm64"} {
		for _, cmd := range []string{"holdfast", "holdfast-reporter", "spegel"} {
			want = append(want, "sbom/"+cmd+"_linux_"+arch+".cdx.json")
		}
	}
	want = append(want, "sbom/holdfast-image.cdx.json")
	if mark == "" {
		want = append(want, rel.chart+".sigstore.json", "holdfast-release.pub")
	}
	slices.Sort(want)
	var listed []string
	b, err := os.ReadFile(filepath.Join(dist, sums))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if _, f, ok := strings.Cut(strings.TrimSpace(line), "  "); ok {
			listed = append(listed, f)
		}
	}
	if !slices.Equal(listed, want) {
		t.Errorf("%s lists %q, want %q", sums, listed, want)
	}
	all := append(slices.Clone(want), sums)
	if mark == "" {
		all = append(all, sums+".sigstore.json")
	}
	var found []string
	filepath.WalkDir(dist, func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			r, _ := filepath.Rel(dist, p)
			found = append(found, filepath.ToSlash(r))
		}
		return err
	})
	slices.Sort(all)
	slices.Sort(found)
	if !slices.Equal(found, all) {
		t.Errorf("%s holds %q, want %q", dist, found, all)
	}
	cmd := exec.Command("sha256sum", "-c", "--strict", sums)
	cmd.Dir = dist
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c %s: %v\n%s", sums, err, out)
	}
	readReleaseImage(t, filepath.Join(dist, rel.image), &rel)
	return rel
}

// readReleaseImage reads the archive's index.json, its small blobs and the
// platforms of its image.
func readReleaseImage(t *testing.T, path string, rel *release) {
	t.Helper()
	rel.blobs = map[string][]byte{}
	walkTar(t, path, func(hdr *tar.Header, r io.Reader) {
		if hdr.Size <= 1<<20 {
			rel.blobs[hdr.Name] = readAllOf(t, path, r)
		}
	})
	var idx ocispec.Index
	if err := json.Unmarshal(rel.blobs["index.json"], &idx); err != nil || len(idx.Manifests) == 0 {
		t.Fatalf("%s: index.json: %v %s", path, err, rel.blobs["index.json"])
	}
	rel.index, rel.referrers = idx.Manifests[0], idx.Manifests[1:]
	if n := rel.index.Annotations[oci.AnnotationImageName]; n != ownRepo+":"+releaseVersion {
		t.Errorf("%s names its image %q, want %s", path, n, ownRepo+":"+releaseVersion)
	}
	var image ocispec.Index
	if err := json.Unmarshal(rel.blob(t, rel.index.Digest.String()), &image); err != nil {
		t.Fatal(err)
	}
	rel.platforms = image.Manifests
	var archs []string
	for _, p := range rel.platforms {
		archs = append(archs, p.Platform.OS+"/"+p.Platform.Architecture)
	}
	if !slices.Equal(archs, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("the image's platforms are %q, want linux/amd64 and linux/arm64", archs)
	}
}

// blob is the archive's blob of digest d.
func (r release) blob(t *testing.T, d string) []byte {
	t.Helper()
	b, ok := r.blobs["blobs/sha256/"+strings.TrimPrefix(d, "sha256:")]
	if !ok {
		t.Fatalf("the image archive holds no blob %s", d)
	}
	return b
}

// referrersOf are the referrer entries whose subject is d, by artifact type.
func (r release) referrersOf(d string) map[string][]ocispec.Descriptor {
	out := map[string][]ocispec.Descriptor{}
	for _, e := range r.referrers {
		if e.Annotations[oci.AnnotationManifestSubject] == d {
			out[e.ArtifactType] = append(out[e.ArtifactType], e)
		}
	}
	return out
}

// releasePolicy writes a policy enforcing the release key on holdfast's image.
func releasePolicy(t *testing.T, dist string) string {
	t.Helper()
	pol := filepath.Join(tempDir(t), "policy.yaml")
	body := "mode: enforce\nrules:\n  - images: [\"" + ownRepo + "*\"]\n    keys: [" + filepath.Join(dist, "holdfast-release.pub") + "]\n"
	if err := os.WriteFile(pol, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return pol
}

// checkReleaseSignatures: the index, each platform manifest and the SBOM
// referrer carry one signature referrer each; holdfast verify says verified
// for the image, and for each platform's manifest named alone in a layout
// of the archive's blobs; cosign verifies them in a registry and the blobs.
func checkReleaseSignatures(t *testing.T, dir, dist string, rel release) {
	t.Helper()
	pol := releasePolicy(t, dist)
	imageName := ownRepo + ":" + releaseVersion
	v := holdfast(t, "verify", "--policy", pol, "-o", "json", filepath.Join(dist, rel.image))
	if st := verifyStates(t, v); v.Code != 0 || len(st) != 1 || st[imageName] != "verified" {
		t.Errorf("holdfast verify of %s: exit %d, %v, want 0 and only %s verified\n%s%s", rel.image, v.Code, st, imageName, v.Stdout, v.Stderr)
	}
	// Under a policy naming another key, the same archive is refused: only the release key verifies it.
	otherKey := tempDir(t)
	cosign3(t, otherKey, "generate-key-pair", "--output-key-prefix", "other")
	otherPol := filepath.Join(otherKey, "policy.yaml")
	body := "mode: enforce\nrules:\n  - images: [\"" + ownRepo + "*\"]\n    keys: [" + filepath.Join(otherKey, "other.pub") + "]\n"
	if err := os.WriteFile(otherPol, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	v = holdfast(t, "verify", "--policy", otherPol, "-o", "json", filepath.Join(dist, rel.image))
	if st := verifyStates(t, v); v.Code == 0 || st[imageName] == "verified" || st[imageName] == "" {
		t.Errorf("holdfast verify of %s under another key: exit %d, %v, want non-zero and %s not verified\n%s%s", rel.image, v.Code, st, imageName, v.Stdout, v.Stderr)
	}
	sboms := rel.referrersOf(rel.index.Digest.String())[oci.MediaTypeCycloneDX]
	if len(sboms) != 1 {
		t.Fatalf("the archive lists %d SBOM referrers of the image, want 1: %+v", len(sboms), rel.referrers)
	}
	subjects := []ocispec.Descriptor{rel.index, sboms[0]}
	subjects = append(subjects, rel.platforms...)
	for _, s := range subjects {
		if sigs := rel.referrersOf(s.Digest.String())[oci.MediaTypeSigstoreBundle]; len(sigs) != 1 {
			t.Errorf("%s has %d signature referrers in the archive, want 1", s.Digest, len(sigs))
		}
	}
	if len(rel.referrers) != 1+len(subjects) {
		t.Errorf("the archive lists %d referrers, want %d (the SBOM and a signature of each of %d)", len(rel.referrers), 1+len(subjects), len(subjects))
	}
	for _, p := range rel.platforms {
		one := filepath.Join(tempDir(t), "layout")
		n := ownRepo + ":" + releaseVersion + "-" + p.Platform.Architecture
		writePlatformLayout(t, one, filepath.Join(dist, rel.image), rel, p, n)
		v := holdfast(t, "verify", "--policy", pol, "-o", "json", one)
		if st := verifyStates(t, v)[n]; v.Code != 0 || st != "verified" {
			t.Errorf("holdfast verify of the %s manifest alone: exit %d, %q, want 0 and verified\n%s%s", p.Platform.Architecture, v.Code, st, v.Stdout, v.Stderr)
		}
	}

	host := pushRelease(t, filepath.Join(dist, rel.image), rel)
	pub := filepath.Join(dist, "holdfast-release.pub")
	for _, s := range append([]ocispec.Descriptor{rel.index}, rel.platforms...) {
		cosign3(t, dir, "verify", "--key", pub, "--offline", "--insecure-ignore-tlog", "--allow-http-registry", host+"/holdfast@"+s.Digest.String())
	}
	for _, f := range []string{rel.chart, "SHA256SUMS"} {
		cosign3(t, dir, "verify-blob", "--key", pub, "--offline", "--insecure-ignore-tlog", "--bundle", filepath.Join(dist, f+".sigstore.json"), filepath.Join(dist, f))
	}
	other := filepath.Join(dist, "hauler-manifest.yaml")
	cmd := exec.Command(cosign3Bin(t), "verify-blob", "--key", pub, "--offline", "--insecure-ignore-tlog", "--bundle", filepath.Join(dist, rel.chart+".sigstore.json"), other)
	cmd.Env = append(os.Environ(), "SIGSTORE_NO_CACHE=true", "TUF_ROOT="+filepath.Join(dir, "tuf"))
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("cosign verify-blob of another file by the chart's bundle passed:\n%s", out)
	}
}

// writePlatformLayout writes an OCI layout dir at dir of the archive
// whose index.json names the platform manifest p (as name) and lists the
// archive's referrers.
func writePlatformLayout(t *testing.T, dir, archive string, rel release, p ocispec.Descriptor, name string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xf", archive, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("tar -xf %s: %v\n%s", archive, err, out)
	}
	e := p
	e.Platform = nil
	e.Annotations = map[string]string{oci.AnnotationImageName: name}
	idx := ocispec.Index{MediaType: ocispec.MediaTypeImageIndex, Manifests: append([]ocispec.Descriptor{e}, rel.referrers...)}
	idx.SchemaVersion = 2
	b, err := json.Marshal(idx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// pushRelease pushes the archive's image and every referrer it lists to a
// registry with the referrers API, as they are in the archive, and returns
// the registry's host.
func pushRelease(t *testing.T, archive string, rel release) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.WithReferrersSupport(true), registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	dir := filepath.Join(tempDir(t), "layout")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xf", archive, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("tar -xf %s: %v\n%s", archive, err, out)
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	h, err := v1.NewHash(rel.index.Digest.String())
	if err != nil {
		t.Fatal(err)
	}
	idx, err := top.ImageIndex(h)
	if err != nil {
		t.Fatal(err)
	}
	repo, err := name.NewRepository(host + "/holdfast")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(repo.Digest(h.String()), idx); err != nil {
		t.Fatalf("pushing the image: %v", err)
	}
	for _, r := range rel.referrers {
		raw := rel.blob(t, r.Digest.String())
		var m ocispec.Manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		for _, b := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
			if err := remote.WriteLayer(repo, static.NewLayer(rel.blob(t, b.Digest.String()), types.MediaType(b.MediaType))); err != nil {
				t.Fatalf("pushing %s: %v", b.Digest, err)
			}
		}
		if err := remote.Put(repo.Digest(r.Digest.String()), rawDoc{raw, m.MediaType}); err != nil {
			t.Fatalf("pushing the referrer %s: %v", r.Digest, err)
		}
	}
	return host
}

// rawDoc is a manifest's bytes, for remote.Put.
type rawDoc struct {
	b  []byte
	mt string
}

func (d rawDoc) RawManifest() ([]byte, error)        { return d.b, nil }
func (d rawDoc) MediaType() (types.MediaType, error) { return types.MediaType(d.mt), nil }

// releaseModules are the modules the SBOM must name as the binary links them.
var releaseModules = []string{"github.com/containerd/containerd/v2", "k8s.io/client-go", "github.com/sigstore/sigstore-go"}

// checkReleaseSBOM: the archive's SBOM referrer carries the image SBOM of
// dist as it is; it and the amd64 holdfast binary's SBOM name
// releaseModules at the versions go version -m reads in bin.
func checkReleaseSBOM(t *testing.T, dist string, rel release, bin string) {
	t.Helper()
	file, err := os.ReadFile(filepath.Join(dist, "sbom", "holdfast-image.cdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	sbom := rel.referrersOf(rel.index.Digest.String())[oci.MediaTypeCycloneDX][0]
	var m ocispec.Manifest
	if err := json.Unmarshal(rel.blob(t, sbom.Digest.String()), &m); err != nil {
		t.Fatal(err)
	}
	if m.ArtifactType != oci.MediaTypeCycloneDX || len(m.Layers) != 1 || m.Subject == nil || m.Subject.Digest != rel.index.Digest {
		t.Fatalf("the SBOM referrer: %s", rel.blob(t, sbom.Digest.String()))
	}
	if inArchive := rel.blob(t, m.Layers[0].Digest.String()); !bytes.Equal(inArchive, file) {
		t.Errorf("the SBOM referrer's layer (%d bytes) is not sbom/holdfast-image.cdx.json (%d bytes)", len(inArchive), len(file))
	}
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m %s: %v", bin, err)
	}
	linked := map[string]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "dep" {
			linked[f[1]] = f[2]
		}
		if len(f) >= 3 && f[0] == "=>" && len(linked) > 0 {
			linked[f[1]] = f[2]
		}
	}
	for _, f := range []string{"holdfast-image.cdx.json", "holdfast_linux_amd64.cdx.json"} {
		b, err := os.ReadFile(filepath.Join(dist, "sbom", f))
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("sbom/%s: %v", f, err)
		}
		named := map[string][]string{}
		sbomComponents(doc, named)
		for _, mod := range releaseModules {
			v, ok := linked[mod]
			if !ok {
				t.Fatalf("go version -m %s names no %s:\n%s", bin, mod, out)
			}
			if !slices.Contains(named[mod], v) {
				t.Errorf("sbom/%s names %s at %q, want %s as go version -m says", f, mod, named[mod], v)
			}
		}
	}
}

// sbomComponents adds every object of a CycloneDX document that has a name
// and a version (the components, at any depth) to named.
func sbomComponents(v any, named map[string][]string) {
	switch x := v.(type) {
	case map[string]any:
		n, nok := x["name"].(string)
		ver, vok := x["version"].(string)
		if nok && vok {
			named[n] = append(named[n], ver)
		}
		for _, c := range x {
			sbomComponents(c, named)
		}
	case []any:
		for _, c := range x {
			sbomComponents(c, named)
		}
	}
}

// checkReleaseChart: the chart package's values pin the image by the
// archive's digest, its version is the release's, and helm renders every
// container of holdfast's image as repository@digest.
func checkReleaseChart(t *testing.T, dist string, rel release) {
	t.Helper()
	files := readTgz(t, filepath.Join(dist, rel.chart))
	var values struct {
		Image struct{ Repository, Tag, Digest string } `yaml:"image"`
	}
	if err := yaml.Unmarshal(files["holdfast/values.yaml"], &values); err != nil {
		t.Fatalf("the chart's values.yaml: %v", err)
	}
	if values.Image.Digest != rel.index.Digest.String() || values.Image.Tag != releaseVersion {
		t.Errorf("the chart's image.digest %q and image.tag %q, want %s and %s", values.Image.Digest, values.Image.Tag, rel.index.Digest, releaseVersion)
	}
	var chart struct {
		Version    string `yaml:"version"`
		AppVersion string `yaml:"appVersion"`
	}
	if err := yaml.Unmarshal(files["holdfast/Chart.yaml"], &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != releaseV || chart.AppVersion != releaseV {
		t.Errorf("Chart.yaml version %q, appVersion %q, want %s", chart.Version, chart.AppVersion, releaseV)
	}
	helm, _ := releaseTools(t)
	out, err := exec.Command(helm, "template", "hf", filepath.Join(dist, rel.chart), "--set", "runtime=containerd", "--set", "peers.enabled=true").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", rel.chart, err, out)
	}
	want := ownRepo + "@" + rel.index.Digest.String()
	n := 0
	for line := range strings.Lines(string(out)) {
		img, ok := strings.CutPrefix(strings.TrimSpace(line), "image: ")
		if !ok || !strings.Contains(img, ownRepo) {
			continue
		}
		n++
		if strings.Trim(img, `"`) != want {
			t.Errorf("the chart renders the image %s, want %s", img, want)
		}
	}
	if n < 3 {
		t.Errorf("the chart renders %d containers of holdfast's image, want the agent, the reporter and spegel:\n%s", n, out)
	}
}

// readTgz reads a gzip tar's regular files.
func readTgz(t *testing.T, path string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	walkTar(t, path, func(hdr *tar.Header, r io.Reader) { out[hdr.Name] = readAllOf(t, path, r) })
	return out
}

// walkTar calls fn with each entry of the tar at path (gzip-compressed when
// its name ends in .tgz), in order; an error reading it fails t.
func walkTar(t *testing.T, path string, fn func(*tar.Header, io.Reader)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".tgz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		fn(hdr, tr)
	}
}

// readAllOf is r read to its end, an entry of the tar at path.
func readAllOf(t *testing.T, path string, r io.Reader) []byte {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

// checkReleaseBundles: Hauler's manifest names the image by digest and the
// chart package; so does Zarf's package definition.
func checkReleaseBundles(t *testing.T, dist string, rel release) {
	t.Helper()
	image := ownRepo + "@" + rel.index.Digest.String()
	b, err := os.ReadFile(filepath.Join(dist, "hauler-manifest.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	type haulerDoc struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Spec       struct {
			Images []struct{ Name string } `yaml:"images"`
			Charts []struct {
				Name    string `yaml:"name"`
				RepoURL string `yaml:"repoURL"`
			} `yaml:"charts"`
		} `yaml:"spec"`
	}
	var kinds []string
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var d haulerDoc
		if err := dec.Decode(&d); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("hauler-manifest.yaml: %v", err)
		}
		if d.APIVersion != "content.hauler.cattle.io/v1" {
			t.Errorf("hauler-manifest.yaml: a document of apiVersion %q", d.APIVersion)
		}
		kinds = append(kinds, d.Kind)
		switch d.Kind {
		case "Images":
			if len(d.Spec.Images) != 1 || d.Spec.Images[0].Name != image {
				t.Errorf("hauler-manifest.yaml Images: %+v, want %s", d.Spec.Images, image)
			}
		case "Charts":
			if len(d.Spec.Charts) != 1 || filepath.Join(d.Spec.Charts[0].RepoURL, d.Spec.Charts[0].Name) != rel.chart {
				t.Errorf("hauler-manifest.yaml Charts: %+v, want %s", d.Spec.Charts, rel.chart)
			}
		}
	}
	if !slices.Equal(kinds, []string{"Images", "Charts"}) {
		t.Errorf("hauler-manifest.yaml holds %q, want Images and Charts", kinds)
	}
	b, err = os.ReadFile(filepath.Join(dist, "zarf.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var zarf struct {
		Kind       string `yaml:"kind"`
		Components []struct {
			Images []string `yaml:"images"`
			Charts []struct {
				LocalPath string `yaml:"localPath"`
			} `yaml:"charts"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(b, &zarf); err != nil {
		t.Fatalf("zarf.yaml: %v", err)
	}
	if zarf.Kind != "ZarfPackageConfig" || len(zarf.Components) != 1 || !slices.Equal(zarf.Components[0].Images, []string{image}) ||
		len(zarf.Components[0].Charts) != 1 || zarf.Components[0].Charts[0].LocalPath != rel.chart {
		t.Errorf("zarf.yaml: %+v, want one component with the image %s and the chart %s", zarf, image, rel.chart)
	}
}

// checkReleaseImport: holdfast import of the archive under the policy pins
// the image by its names only: the referrers (the SBOM among them) are
// skipped as such, and no record names one.
func checkReleaseImport(t *testing.T, dist string, rel release) {
	t.Helper()
	d := startEmbedded(t)
	dataDir := filepath.Join(tempDir(t), "data")
	res := holdfast(t, "import", "--address", d.Address, "--data-dir", dataDir, "--policy", releasePolicy(t, dist), filepath.Join(dist, rel.image))
	imageName := ownRepo + ":" + releaseVersion
	if res.Code != 0 || !strings.Contains(res.Stdout, imageName+": signature: verified by") {
		t.Fatalf("import of %s: exit %d, want 0 and %s verified\n%s%s", rel.image, res.Code, imageName, res.Stdout, res.Stderr)
	}
	d.requirePinned(t, imageName)
	var st struct {
		Sources []struct {
			Path    string         `json:"path"`
			Images  int            `json:"images"`
			Skipped map[string]int `json:"skipped"`
		} `json:"sources"`
	}
	readStatus(t, &st, "--address", d.Address, "--data-dir", dataDir)
	if len(st.Sources) != 1 || st.Sources[0].Skipped["referrer"] != len(rel.referrers) || len(st.Sources[0].Skipped) != 1 {
		t.Errorf("status of the kept source: %+v, want %d entries skipped as referrers, nothing else", st.Sources, len(rel.referrers))
	}
	for _, n := range d.recordNames(t) {
		if strings.HasPrefix(n, "sha256:") {
			continue // the CRI's record of the image's config
		}
		if !strings.HasPrefix(n, ownRepo+":"+releaseVersion) && !strings.HasPrefix(n, ownRepo+"@"+rel.index.Digest.String()) {
			if _, sig := oci.SignedBy(n); !sig {
				t.Errorf("the import made a record %s, which is no name of the image", n)
			}
		}
	}
	checkReleaseExport(t, d, dataDir, dist, rel)
}

// checkReleaseSame: the second dist holds the same files as the first, the
// same bytes but for what holds a signature: the image archive (whose
// entries differ only in index.json and the signature referrers' manifests
// and bundles, ECDSA signatures being randomized and each referrer timed
// when signed), the chart's and SHA256SUMS's bundles, and SHA256SUMS (in
// the lines of the image archive and the chart's bundle).
func checkReleaseSame(t *testing.T, one, two string, rel release) {
	t.Helper()
	signed := []string{rel.image, rel.chart + ".sigstore.json", "SHA256SUMS", "SHA256SUMS.sigstore.json"}
	a, b := fileDigests(t, one), fileDigests(t, two)
	if !slices.Equal(slices.Sorted(maps.Keys(a)), slices.Sorted(maps.Keys(b))) {
		t.Fatalf("the two releases hold %q and %q", slices.Sorted(maps.Keys(a)), slices.Sorted(maps.Keys(b)))
	}
	var differ []string
	for f, d := range a {
		if b[f] != d {
			differ = append(differ, f)
			if !slices.Contains(signed, f) {
				t.Errorf("%s differs between two releases of one commit", f)
			}
		}
	}
	slices.Sort(differ)
	t.Logf("files that differ between the two releases: %q", differ)
	ta, tb := tarDigests(t, filepath.Join(one, rel.image)), tarDigests(t, filepath.Join(two, rel.image))
	sigBlobs := signatureBlobs(t, rel)
	var other release
	readReleaseImage(t, filepath.Join(two, rel.image), &other)
	maps.Copy(sigBlobs, signatureBlobs(t, other))
	for _, names := range [][]string{slices.Sorted(maps.Keys(ta)), slices.Sorted(maps.Keys(tb))} {
		for _, n := range names {
			if ta[n] != tb[n] && n != "index.json" && !sigBlobs[n] {
				t.Errorf("the image archives of two releases differ in %s, which is no signature", n)
			}
		}
	}
	sa, sb := sumLines(t, one), sumLines(t, two)
	for f, s := range sa {
		if sb[f] != s && f != rel.image && f != rel.chart+".sigstore.json" {
			t.Errorf("SHA256SUMS of two releases differ on %s", f)
		}
	}
}

// fileDigests are the SHA-256 of the files under dir, by relative path.
func fileDigests(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		r, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(r)] = hex.EncodeToString(h.Sum(nil))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tarDigests are the SHA-256 of a tar's entries, by name.
func tarDigests(t *testing.T, path string) map[string]string {
	t.Helper()
	out := map[string]string{}
	walkTar(t, path, func(hdr *tar.Header, r io.Reader) {
		h := sha256.New()
		if _, err := io.Copy(h, r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out[hdr.Name] = hex.EncodeToString(h.Sum(nil))
	})
	return out
}

// signatureBlobs are the archive entries of the signature referrers: each
// manifest and its bundle layer (not the empty config every referrer shares).
func signatureBlobs(t *testing.T, rel release) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, r := range rel.referrers {
		if r.ArtifactType != oci.MediaTypeSigstoreBundle {
			continue
		}
		out["blobs/sha256/"+r.Digest.Encoded()] = true
		var m ocispec.Manifest
		if err := json.Unmarshal(rel.blob(t, r.Digest.String()), &m); err != nil {
			t.Fatal(err)
		}
		for _, l := range m.Layers {
			out["blobs/sha256/"+l.Digest.Encoded()] = true
		}
	}
	return out
}

// sumLines are SHA256SUMS's sums, by file.
func sumLines(t *testing.T, dist string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for line := range strings.Lines(string(b)) {
		if s, f, ok := strings.Cut(strings.TrimSpace(line), "  "); ok {
			out[f] = s
		}
	}
	return out
}

// checkReleaseUnsigned runs the release tool as make release UNSIGNED=1
// does on the first release's image and SBOMs: the files that would be
// signed are named -unsigned, nothing is signed (no bundle, no public key,
// no signature referrer: the SBOM is the archive's one referrer), holdfast
// verify says unsigned, and the chart is the signed release's, byte for
// byte.
func checkReleaseUnsigned(t *testing.T, one, signedDist string, signed release) {
	t.Helper()
	helm, _ := releaseTools(t)
	dist := filepath.Join(tempDir(t), "dist")
	if err := os.CopyFS(filepath.Join(dist, "sbom"), os.DirFS(filepath.Join(signedDist, "sbom"))); err != nil {
		t.Fatal(err)
	}
	epoch, err := exec.Command("git", "-C", repoRoot(), "log", "-1", "--format=%ct").Output()
	if err != nil {
		t.Fatalf("git log: %v", err)
	}
	cmd := exec.Command("go", "run", "./tools/release", "-dist", dist, "-version", releaseVersion,
		"-image", filepath.Join(one, "bin", "holdfast-image.tar"), "-sbom", filepath.Join(dist, "sbom"),
		"-chart", "deploy/helm/holdfast", "-helm", helm, "-unsigned", "-epoch", strings.TrimSpace(string(epoch)))
	cmd.Dir = repoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release -unsigned: %v\n%s", err, out)
	}
	rel := checkReleaseFiles(t, dist, "-unsigned")
	if len(rel.referrers) != 1 || rel.referrers[0].ArtifactType != oci.MediaTypeCycloneDX {
		t.Errorf("the unsigned archive lists the referrers %+v, want the SBOM alone", rel.referrers)
	}
	v := holdfast(t, "verify", "--policy", releasePolicy(t, signedDist), "-o", "json", filepath.Join(dist, rel.image))
	if st := verifyStates(t, v)[ownRepo+":"+releaseVersion]; v.Code != 1 || st != "unsigned" {
		t.Errorf("holdfast verify of the unsigned archive: exit %d, %q, want 1 and unsigned\n%s%s", v.Code, st, v.Stdout, v.Stderr)
	}
	a, err := os.ReadFile(filepath.Join(dist, rel.chart))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(signedDist, signed.chart))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("the unsigned release's chart differs from the signed one's")
	}
}

package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	cdx "github.com/CycloneDX/cyclonedx-go"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

const (
	testRepo   = "ghcr.io/holdfast-project/holdfast"
	testTag    = "1.2.3"
	testEpoch  = "1764760500"
	testDigest = "sha256:2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
	moduleRoot = "../.."
)

// generator is cyclonedx-gomod: on PATH (make test puts bin/ first) or in the
// tree's bin/ (make deps-sbom).
func generator(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("cyclonedx-gomod"); err == nil {
		return p
	}
	if p, err := filepath.Abs(filepath.Join(moduleRoot, "bin", "cyclonedx-gomod")); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	testenv.Missing(t, "sbom", "cyclonedx-gomod is neither on PATH nor in bin/ (make deps-sbom builds it)")
	return ""
}

// goBuild builds the package in dir (relative to the module's root) for
// linux/arch into out as a release does: static, stripped, -trimpath, no VCS
// stamp.
func goBuild(dir, arch, out string) error {
	cmd := exec.Command("go", "build", "-ldflags", "-s -w", "-o", out, ".")
	cmd.Dir = filepath.Join(moduleRoot, dir)
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false -trimpath")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./%s for linux/%s: %w\n%s", dir, arch, err, b)
	}
	return nil
}

// helloBins builds testdata/hello for linux/amd64 and linux/arm64 into a
// dir per platform, twice in each (as hello and hello-too), once per test
// binary.
var helloBins = sync.OnceValues(func() (string, error) {
	root, err := os.MkdirTemp("", "sbom-test-bins-")
	if err != nil {
		return "", err
	}
	helloRoot = root
	for _, arch := range []string{"amd64", "arm64"} {
		dir := filepath.Join(root, "linux_"+arch)
		if err := goBuild("tools/sbom/testdata/hello", arch, filepath.Join(dir, "hello")); err != nil {
			return root, err
		}
		data, err := os.ReadFile(filepath.Join(dir, "hello"))
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "hello-too"), data, 0o755)
		}
		if err != nil {
			return root, err
		}
	}
	return root, nil
})

// helloRoot is the dir helloBins made, if it ran: TestMain removes it.
var helloRoot string

func hello(t *testing.T) string {
	t.Helper()
	root, err := helloBins()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func TestMain(m *testing.M) {
	code := m.Run()
	if helloRoot != "" {
		os.RemoveAll(helloRoot)
	}
	os.Exit(code)
}

// runSBOM runs the command with the flags every test gives (-generator gen
// unless gen is ""), then args; it returns the exit code and what it wrote to
// stderr.
func runSBOM(t *testing.T, gen, out string, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	common := []string{"-o", out, "-image-name", testRepo + ":" + testTag, "-image-digest", testDigest,
		"-gomod", filepath.Join(moduleRoot, "go.mod"), "-epoch", testEpoch}
	if gen != "" {
		common = append(common, "-generator", gen)
	}
	args = append(common, args...)
	code := run(args, &stdout, &stderr)
	return code, stderr.String()
}

func readBOM(t *testing.T, path string) *cdx.BOM {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bom := new(cdx.BOM)
	if err := cdx.NewBOMDecoder(f, cdx.BOMFileFormatJSON).Decode(bom); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return bom
}

// goVersionM is what `go version -m` says the binary links: module path ->
// version (the replacement's when replaced).
func goVersionM(t *testing.T, bin string) map[string]string {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m %s: %v", bin, err)
	}
	deps := map[string]string{}
	var last string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[0] == "dep":
			last, deps[f[1]] = f[1], f[2]
		case len(f) >= 3 && f[0] == "=>":
			deps[last] = f[2]
		}
	}
	return deps
}

// TestBinarySBOMNamesTheModulesLinked: holdfast built as a release builds it;
// its document names each module the binary links at the version
// `go version -m` reports, the three that matter most among them.
func TestBinarySBOMNamesTheModulesLinked(t *testing.T) {
	gen := generator(t)
	arch := runtime.GOARCH
	dir := filepath.Join(t.TempDir(), "linux_"+arch)
	bin := filepath.Join(dir, "holdfast")
	if err := goBuild("cmd/holdfast", arch, bin); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "sbom")
	if code, stderr := runSBOM(t, gen, out, "-bin", "linux/"+arch+"="+dir, "-cmd", "holdfast"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	bom := readBOM(t, filepath.Join(out, "holdfast_linux_"+arch+".cdx.json"))
	got := map[string]string{}
	for _, c := range deref(bom.Components) {
		got[c.Name] = c.Version
	}
	linked := goVersionM(t, bin)
	for _, m := range []string{"github.com/containerd/containerd/v2", "k8s.io/client-go", "github.com/sigstore/sigstore-go"} {
		if linked[m] == "" {
			t.Errorf("go version -m names no %s: the binary no longer links it", m)
		} else if got[m] != linked[m] {
			t.Errorf("the SBOM names %s %q; go version -m: %q", m, got[m], linked[m])
		}
	}
	for m, v := range linked {
		if got[m] != v {
			t.Errorf("the SBOM names %s %q; go version -m: %q", m, got[m], v)
		}
	}
	if len(got) != len(linked)+1 || got["std"] != runtime.Version() {
		t.Errorf("the SBOM has %d components (std %q); want the %d modules linked and std %s", len(got), got["std"], len(linked), runtime.Version())
	}
	main := bom.Metadata.Component
	if main.Name != "github.com/holdfast-project/holdfast" || main.Version != "v"+testTag || main.Type != cdx.ComponentTypeApplication {
		t.Errorf("metadata.component is %s %s (%s), want github.com/holdfast-project/holdfast v%s, an application", main.Name, main.Version, main.Type, testTag)
	}
	if bom.Metadata.Timestamp != "2025-12-03T11:15:00Z" || !strings.HasPrefix(bom.SerialNumber, "urn:uuid:") {
		t.Errorf("timestamp %q, serial %q: want the epoch's time and a UUID", bom.Metadata.Timestamp, bom.SerialNumber)
	}
}

// TestImageSBOMHoldsEveryBinaryOfEveryPlatform: the image's document names the
// image by digest, holds each binary of each platform with its file's hash and
// says which modules each links; a second run writes the same bytes.
func TestImageSBOMHoldsEveryBinaryOfEveryPlatform(t *testing.T) {
	gen := generator(t)
	root := hello(t)
	args := []string{"-bin", "linux/amd64=" + filepath.Join(root, "linux_amd64"), "-bin", "linux/arm64=" + filepath.Join(root, "linux_arm64"),
		"-cmd", "hello", "-cmd", "hello-too"}
	out := filepath.Join(t.TempDir(), "sbom")
	if code, stderr := runSBOM(t, gen, out, args...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	bom := readBOM(t, filepath.Join(out, ImageFile))
	img := bom.Metadata.Component
	if img.Type != cdx.ComponentTypeContainer || img.Name != testRepo || img.Version != testDigest ||
		!strings.HasPrefix(img.PackageURL, "pkg:oci/holdfast@sha256%3A2d7116") {
		t.Errorf("metadata.component: %s %s %s %s; want the container %s at %s", img.Type, img.Name, img.Version, img.PackageURL, testRepo, testDigest)
	}
	comps := map[string]cdx.Component{}
	for _, c := range deref(bom.Components) {
		if _, dup := comps[c.BOMRef]; dup {
			t.Errorf("bom-ref %s twice", c.BOMRef)
		}
		comps[c.BOMRef] = c
	}
	deps := map[string][]string{}
	for _, d := range deref(bom.Dependencies) {
		deps[d.Ref] = deref(d.Dependencies)
		for _, to := range deps[d.Ref] {
			if _, ok := comps[to]; !ok {
				t.Errorf("%s depends on %s, no component", d.Ref, to)
			}
		}
	}
	var bins []string
	for _, arch := range []string{"amd64", "arm64"} {
		for _, cmd := range []string{"hello", "hello-too"} {
			ref := "linux/" + arch + "/" + cmd
			bins = append(bins, ref)
			checkBinary(t, comps[ref], deps[ref], filepath.Join(root, "linux_"+arch, cmd), arch)
			if _, err := os.Stat(filepath.Join(out, cmd+"_linux_"+arch+".cdx.json")); err != nil {
				t.Errorf("no document of %s: %v", ref, err)
			}
		}
	}
	if !slices.Equal(deps[img.BOMRef], bins) {
		t.Errorf("the image depends on %v, want %v", deps[img.BOMRef], bins)
	}

	again := filepath.Join(t.TempDir(), "sbom")
	if code, stderr := runSBOM(t, gen, again, args...); code != 0 {
		t.Fatalf("second run: exit %d: %s", code, stderr)
	}
	sameFiles(t, out, again)
}

func checkBinary(t *testing.T, c cdx.Component, deps []string, file, arch string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if c.Type != cdx.ComponentTypeApplication || c.Hashes == nil || len(*c.Hashes) != 1 || (*c.Hashes)[0].Value != hex.EncodeToString(sum[:]) {
		t.Errorf("%s: component %+v: want an application with the file's SHA-256", file, c)
	}
	want := []string{
		"pkg:golang/github.com/opencontainers/go-digest@v1.0.0?goarch=" + arch + "&goos=linux&type=module",
		"pkg:golang/std@" + runtime.Version() + "?goarch=" + arch + "&goos=linux&type=module",
	}
	if !slices.Equal(deps, want) {
		t.Errorf("%s depends on %v, want %v", file, deps, want)
	}
}

func sameFiles(t *testing.T, a, b string) {
	t.Helper()
	ea, err := os.ReadDir(a)
	if err != nil {
		t.Fatal(err)
	}
	eb, err := os.ReadDir(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(ea) != 5 || len(ea) != len(eb) {
		t.Fatalf("%d files, then %d; want 5 (4 binaries and the image)", len(ea), len(eb))
	}
	for i := range ea {
		da, _ := os.ReadFile(filepath.Join(a, ea[i].Name()))
		db, _ := os.ReadFile(filepath.Join(b, eb[i].Name()))
		if ea[i].Name() != eb[i].Name() || len(da) == 0 || !bytes.Equal(da, db) {
			t.Errorf("%s and %s differ from one run to the next", ea[i].Name(), eb[i].Name())
		}
	}
}

// TestBadBinariesAreNamed: each binary that cannot be documented is named with
// its cause, the others are still checked, and nothing is written.
func TestBadBinariesAreNamed(t *testing.T) {
	gen := generator(t)
	root := hello(t)
	amd64 := filepath.Join(root, "linux_amd64")
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "hello"), []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "linux_amd64")
	if err := goBuild("tools/sbom/testdata/other", "amd64", filepath.Join(other, "other")); err != nil {
		t.Fatal(err)
	}
	oldGoMod := filepath.Join(t.TempDir(), "go.mod")
	if err := os.WriteFile(oldGoMod, []byte("module github.com/holdfast-project/holdfast\n\ngo 1.26\n\nrequire github.com/opencontainers/go-digest v1.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"a binary missing", []string{"-bin", "linux/amd64=" + amd64, "-bin", "linux/arm64=" + t.TempDir(), "-cmd", "hello"},
			[]string{"hello for linux/arm64 (", "no such file"}},
		{"another platform's binary, and one not Go", []string{"-bin", "linux/arm64=" + amd64, "-bin", "linux/amd64=" + bad, "-cmd", "hello"},
			[]string{"hello for linux/arm64 (" + amd64 + "/hello): built for linux/amd64, not linux/arm64",
				"hello for linux/amd64 (" + bad + "/hello): not a Go binary"}},
		{"another module's binary without its version", []string{"-bin", "linux/amd64=" + other, "-cmd", "other"},
			[]string{"other for linux/amd64 (", "names no version of example.com/other: give -version other=VERSION"}},
		{"a binary not built from the go.mod", []string{"-gomod", oldGoMod, "-bin", "linux/amd64=" + amd64, "-cmd", "hello"},
			[]string{"hello for linux/amd64 (", "links github.com/opencontainers/go-digest v1.0.0, " + oldGoMod + " requires v1.0.1"}},
		{"the generator failing", []string{"-generator", "false", "-bin", "linux/amd64=" + amd64, "-cmd", "hello"},
			[]string{"hello for linux/amd64 (", "exit status 1"}},
		{"no generator", []string{"-generator", filepath.Join(t.TempDir(), "cyclonedx-gomod"), "-bin", "linux/amd64=" + amd64, "-cmd", "hello"},
			[]string{"-generator: exec: ", "no such file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "sbom")
			code, stderr := runSBOM(t, gen, out, tc.args...)
			if code != 1 {
				t.Errorf("exit %d, want 1: %s", code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not say %q", stderr, w)
				}
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("%s was made (%v): nothing should be written", out, err)
			}
		})
	}

	t.Run("another module's binary with its version", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "sbom")
		if code, stderr := runSBOM(t, gen, out, "-bin", "linux/amd64="+other, "-cmd", "other", "-version", "other=v0.7.2-k3s1"); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		main := readBOM(t, filepath.Join(out, "other_linux_amd64.cdx.json")).Metadata.Component
		if main.Name != "example.com/other" || main.Version != "v0.7.2-k3s1" {
			t.Errorf("metadata.component is %s %s, want example.com/other v0.7.2-k3s1", main.Name, main.Version)
		}
	})
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-image-digest", testDigest, "-bin", "linux/amd64=x", "-cmd", "a"}, "-image-name REPOSITORY:TAG is required"},
		{[]string{"-image-name", testRepo, "-image-digest", testDigest, "-bin", "linux/amd64=x", "-cmd", "a"}, "is not REPOSITORY:TAG"},
		{[]string{"-image-name", testRepo + ":v1", "-image-digest", "sha256:abc", "-bin", "linux/amd64=x", "-cmd", "a"}, "is not sha256:"},
		{[]string{"-image-name", testRepo + ":v1", "-image-digest", testDigest, "-bin", "linux=x", "-cmd", "a"}, "is not OS/ARCH=DIR"},
		{[]string{"-image-name", testRepo + ":v1", "-image-digest", testDigest, "-bin", "linux/amd64=x", "-cmd", "a/b"}, "is not a file name"},
		{[]string{"-image-name", testRepo + ":v1", "-image-digest", testDigest, "-bin", "linux/amd64=x", "-cmd", "a", "-cmd", "a"}, "given twice"},
		{[]string{"-image-name", testRepo + ":v1", "-image-digest", testDigest, "-bin", "linux/amd64=x", "-cmd", "a", "-version", "b=v1"}, "b is no -cmd"},
		{[]string{"-image-name", testRepo + ":v1", "-image-digest", testDigest, "-bin", "linux/amd64=x", "-cmd", "a", "-epoch", "yesterday"}, "is not a number of seconds"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(append([]string{"-o", t.TempDir()}, tc.args...), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

func TestModuleVersion(t *testing.T) {
	for tag, want := range map[string]string{"1.2.3": "v1.2.3", "v1.2.3": "v1.2.3", "v1.2.3-4-gdeadbee": "v1.2.3-4-gdeadbee", "00ea51a": "00ea51a", "00ea51a-dirty": "00ea51a-dirty"} {
		if got := (&options{Tag: tag}).moduleVersion(); got != want {
			t.Errorf("tag %s: %s, want %s", tag, got, want)
		}
	}
}

// TestGeneratorBesideGoMod: with no -generator and no cyclonedx-gomod in PATH,
// the one in the bin/ beside the go.mod is run (make deps-sbom links it there);
// with none there either, the error says where it looked.
func TestGeneratorBesideGoMod(t *testing.T) {
	gen := generator(t)
	root := hello(t)
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(goCmd), "cyclonedx-gomod")); err == nil {
		t.Fatalf("cyclonedx-gomod is beside %s: this test cannot take it out of PATH", goCmd)
	}
	t.Setenv("PATH", filepath.Dir(goCmd)) // cyclonedx-gomod runs go env
	tree := t.TempDir()
	data, err := os.ReadFile(filepath.Join(moduleRoot, "go.mod"))
	if err == nil {
		err = os.WriteFile(filepath.Join(tree, "go.mod"), data, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-gomod", filepath.Join(tree, "go.mod"), "-bin", "linux/amd64=" + filepath.Join(root, "linux_amd64"), "-cmd", "hello"}

	out := filepath.Join(t.TempDir(), "sbom")
	code, stderr := runSBOM(t, "", out, args...)
	if want := "neither in PATH nor " + filepath.Join(tree, "bin", "cyclonedx-gomod"); code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("no generator anywhere: exit %d, %q; want 1 and %q", code, stderr, want)
	}

	if err := os.Mkdir(filepath.Join(tree, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(gen, filepath.Join(tree, "bin", "cyclonedx-gomod")); err != nil {
		t.Fatal(err)
	}
	if code, stderr := runSBOM(t, "", out, args...); code != 0 {
		t.Fatalf("the generator in bin/: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "hello_linux_amd64.cdx.json")); err != nil {
		t.Error(err)
	}
}

// TestNoWriteFollowsALink: a document's path that is a link to another file is
// replaced by the document; the file linked to is left as it was.
func TestNoWriteFollowsALink(t *testing.T) {
	gen := generator(t)
	root := hello(t)
	out := filepath.Join(t.TempDir(), "sbom")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"hello_linux_amd64.cdx.json", ImageFile} {
		if err := os.Symlink(victim, filepath.Join(out, name)); err != nil {
			t.Fatal(err)
		}
	}
	if code, stderr := runSBOM(t, gen, out, "-bin", "linux/amd64="+filepath.Join(root, "linux_amd64"), "-cmd", "hello"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep me\n" {
		t.Errorf("the file linked to holds %d bytes (%v), want it as it was", len(b), err)
	}
	for _, name := range []string{"hello_linux_amd64.cdx.json", ImageFile} {
		fi, err := os.Lstat(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() {
			t.Errorf("%s is a %s, want a regular file", name, fi.Mode().Type())
			continue
		}
		if bom := readBOM(t, filepath.Join(out, name)); bom.SpecVersion != cdx.SpecVersion1_6 || bom.BOMFormat != "CycloneDX" {
			t.Errorf("%s: %s %s, want CycloneDX 1.6", name, bom.BOMFormat, bom.SpecVersion)
		}
	}
}

package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// bundleImages are a single-platform image under a familiar Docker Hub name
// and a two-platform one under a full name: the names a bundle spells its way.
func bundleImages(t *testing.T) (app, multi *fixture.Image) {
	t.Helper()
	build := func(spec fixture.ImageSpec) *fixture.Image {
		img, err := fixture.Build(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	app = build(fixture.ImageSpec{Names: []string{"nginx:1.25"}, Labels: map[string]string{"app": "nginx"},
		Layers: fixture.UniformLayers(2, 4<<10, false, 1)})
	multi = build(fixture.ImageSpec{Names: []string{"registry.example.com/demo/multi:2"},
		Platforms: []fixture.Platform{fixture.HostPlatform(), {OS: "linux", Architecture: "arm64"}},
		Layers:    fixture.UniformLayers(1, 4<<10, false, 2)})
	return app, multi
}

// walkBytes walks an archive held in memory, compressed with c.
func walkBytes(t *testing.T, c fixture.Compression, write func(w *bytes.Buffer) error, opts WalkOptions) (*Result, *memStore, error) {
	t.Helper()
	var tarball bytes.Buffer
	if err := write(&tarball); err != nil {
		t.Fatal(err)
	}
	b, err := fixture.CompressBytes(c, fixture.CompressOptions{}, tarball.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	st := newMemStore()
	res, err := WalkWith(context.Background(), bytes.NewReader(b), st, opts)
	return res, st, err
}

// foundNames are the names a walk found, and the spellings it kept, "name<recorded".
func foundNames(res *Result) []string {
	var out []string
	for _, img := range res.Images {
		n := img.Name
		if img.Recorded != "" {
			n += "<" + img.Recorded
		}
		out = append(out, n)
	}
	return out
}

func reasons(res *Result) map[string]int {
	out := map[string]int{}
	for _, s := range res.Skipped {
		out[s.Reason]++
	}
	return out
}

// TestHaul: a haul's images are found under their normalised names, with
// Hauler's spelling kept; its signatures, attestations and referrers, which
// carry the same names, and its charts and files are skipped and no image
// points at one; manifest.json, which flattens the multi-platform image, is
// not used; so in every shape Hauler writes.
func TestHaul(t *testing.T) {
	app, multi := bundleImages(t)
	want := []string{
		"docker.io/library/nginx:1.25<index.docker.io/library/nginx:1.25",
		"registry.example.com/demo/multi:2",
	}
	for _, tc := range []struct {
		name string
		opts fixture.HaulOptions
		skip map[string]int
	}{
		{"plain", fixture.HaulOptions{}, map[string]int{}},
		{"signed", fixture.HaulOptions{Signatures: true, Referrers: true, StoreJSON: true},
			map[string]int{"signature": 2, "attestation": 2, "referrer": 2}},
		{"signatures first", fixture.HaulOptions{Signatures: true, SignaturesFirst: true}, map[string]int{"signature": 2, "attestation": 2}},
		{"containerd", fixture.HaulOptions{Containerd: true, Signatures: true}, map[string]int{"signature": 2, "attestation": 2}},
		{"legacy kinds", fixture.HaulOptions{LegacyKinds: true, Signatures: true}, map[string]int{"signature": 2, "attestation": 2}},
		{"charts and files", fixture.HaulOptions{Charts: []fixture.HaulChart{{Name: "podinfo", Version: "6.5.0", RepoURL: "oci://ghcr.io/stefanprodan/charts"}},
			Files: []fixture.HaulFile{{Path: "/opt/install.sh", Data: []byte("#!/bin/sh\n")}}}, map[string]int{"chart": 1, "file": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, _, err := walkBytes(t, fixture.Zstd, func(w *bytes.Buffer) error {
				return fixture.WriteHaul(context.Background(), w, tc.opts, app, multi)
			}, WalkOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Format != FormatHaul {
				t.Errorf("format %s, want %s", res.Format, FormatHaul)
			}
			if got := foundNames(res); !slices.Equal(got, want) {
				t.Errorf("images %v, want %v", got, want)
			}
			if got := reasons(res); !mapsEqual(got, tc.skip) {
				t.Errorf("skipped %v, want %v", got, tc.skip)
			}
			for _, img := range res.Images {
				if img.Target.Digest != app.Target.Digest && img.Target.Digest != multi.Target.Digest {
					t.Errorf("%s points at %s, which is neither image", img.Name, img.Target.Digest)
				}
			}
		})
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestHaulWithoutImages: a haul that holds nothing but charts and files is
// no image archive: the error counts what it holds.
func TestHaulWithoutImages(t *testing.T) {
	_, _, err := walkBytes(t, fixture.Zstd, func(w *bytes.Buffer) error {
		return fixture.WriteHaul(context.Background(), w, fixture.HaulOptions{
			Charts: []fixture.HaulChart{{Name: "podinfo", Version: "6.5.0"}},
			Files:  []fixture.HaulFile{{Path: "/opt/a.sh", Data: []byte("x")}},
		})
	}, WalkOptions{})
	if !errors.Is(err, ErrNotImage) || !strings.Contains(err.Error(), "only 1 chart, 1 file") {
		t.Fatalf("walk of a haul of a chart and a file: %v", err)
	}
}

// TestZarf: a Zarf package's images are the ones zarf.yaml names, found in
// its layout under images/ by ref.name or, in older packages, base.name;
// cosign signature tags and Helm charts are skipped, and nothing outside
// images/ is written to the store.
func TestZarf(t *testing.T) {
	app, multi := bundleImages(t)
	want := []string{"docker.io/library/nginx:1.25<nginx:1.25", "registry.example.com/demo/multi:2"}
	for _, tc := range []struct {
		name string
		opts fixture.ZarfOptions
		skip map[string]int
	}{
		{"current", fixture.ZarfOptions{}, map[string]int{}},
		{"image archives", fixture.ZarfOptions{ImageArchives: true}, map[string]int{}},
		{"base name only", fixture.ZarfOptions{BaseNameOnly: true}, map[string]int{}},
		{"short names", fixture.ZarfOptions{BaseNameOnly: true, ShortNames: true}, map[string]int{}},
		{"signatures and chart", fixture.ZarfOptions{Signatures: true, HelmChart: "ghcr.io/stefanprodan/charts/podinfo:6.5.0"},
			map[string]int{"signature": 2, "attestation": 2, "chart": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, st, err := walkBytes(t, fixture.Zstd, func(w *bytes.Buffer) error {
				return fixture.WriteZarf(context.Background(), w, tc.opts, app, multi)
			}, WalkOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Format != FormatZarf {
				t.Errorf("format %s, want %s", res.Format, FormatZarf)
			}
			got := foundNames(res)
			for i := range got { // the recorded spelling is the package's own
				got[i], _, _ = strings.Cut(got[i], "<")
			}
			plain := []string{"docker.io/library/nginx:1.25", "registry.example.com/demo/multi:2"}
			if !slices.Equal(got, plain) {
				t.Errorf("images %v, want %v", foundNames(res), want)
			}
			if got := reasons(res); !mapsEqual(got, tc.skip) {
				t.Errorf("skipped %v, want %v", got, tc.skip)
			}
			for _, d := range st.puts {
				if _, ok := res.Blobs[d]; !ok {
					t.Errorf("blob %s written that the layout does not hold (a component or SBOM file?)", d)
				}
			}
		})
	}
}

// TestZarfRefused: a Zarf package whose checksums do not hold, or whose
// zarf.yaml names an image its layout lacks, is refused with an error that
// names the file or the image.
func TestZarfRefused(t *testing.T) {
	app, _ := bundleImages(t)
	for _, tc := range []struct {
		name string
		opts fixture.ZarfOptions
		want string
	}{
		{"corrupt index", fixture.ZarfOptions{CorruptFile: "images/index.json"}, "images/index.json has sha256"},
		{"corrupt blob", fixture.ZarfOptions{CorruptFile: "images/blobs/sha256/" + app.Target.Digest.Encoded()}, "images/blobs/sha256/" + app.Target.Digest.Encoded() + " has sha256"},
		{"wrong aggregate", fixture.ZarfOptions{WrongAggregate: true}, "aggregateChecksum"},
		{"missing image", fixture.ZarfOptions{MissingImage: "docker.io/library/redis:7"}, "zarf.yaml names docker.io/library/redis:7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := walkBytes(t, fixture.None, func(w *bytes.Buffer) error {
				return fixture.WriteZarf(context.Background(), w, tc.opts, app)
			}, WalkOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("walk: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestCosignLayout: a cosign save layout names no image: without a name the
// walk says to give one; with one, its image is named so and its signatures
// are skipped.
func TestCosignLayout(t *testing.T) {
	app, _ := bundleImages(t)
	dir := t.TempDir()
	if err := fixture.WriteCosignDir(context.Background(), dir, app, true); err != nil {
		t.Fatal(err)
	}
	if _, err := WalkDir(context.Background(), dir, newMemStore()); err == nil || !strings.Contains(err.Error(), "--name") {
		t.Fatalf("walk without a name: %v, want an error saying to give --name", err)
	}
	res, err := WalkDirWith(context.Background(), dir, newMemStore(), WalkOptions{Name: "registry.example.com/signed/app:1"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Format != FormatCosign || !slices.Equal(foundNames(res), []string{"registry.example.com/signed/app:1"}) ||
		res.Images[0].Target.Digest != app.Target.Digest {
		t.Errorf("walk with --name: format %s, images %v", res.Format, res.Images)
	}
	if got := reasons(res); !mapsEqual(got, map[string]int{"signature": 1, "attestation": 1}) {
		t.Errorf("skipped %v", got)
	}
}

// TestHaulDirWithoutOCILayout: a store dir saved for containerd has
// index.json and blobs/ but no oci-layout file: it is read all the same.
func TestHaulDirWithoutOCILayout(t *testing.T) {
	app, multi := bundleImages(t)
	var tarball bytes.Buffer
	if err := fixture.WriteHaul(context.Background(), &tarball, fixture.HaulOptions{Containerd: true, Signatures: true}, app, multi); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	extract(t, tarball.Bytes(), dir)
	res, err := WalkDir(context.Background(), dir, newMemStore())
	if err != nil {
		t.Fatal(err)
	}
	if res.Format != FormatHaul || len(res.Images) != 2 {
		t.Errorf("format %s, images %v", res.Format, foundNames(res))
	}
}

// extract writes the regular files of a tar into dir.
func extract(t *testing.T, b []byte, dir string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

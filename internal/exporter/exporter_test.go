package exporter_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/exporter"
	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/importer"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/pattern"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
)

// The tests export from the fake's in-memory store, filled by the real
// import (importer.Import), and read the archive back with the real
// import into a fresh store: what holdfast import makes of the export.

var arm64 = fixture.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}

func otherPlatform() fixture.Platform {
	if fixture.HostPlatform().Architecture == "arm64" {
		return fixture.Platform{OS: "linux", Architecture: "amd64"}
	}
	return arm64
}

func build(t *testing.T, spec fixture.ImageSpec) *fixture.Image {
	t.Helper()
	img, err := fixture.Build(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// importArchive imports the archive data as source path into rt, and pins
// every name it gives, as a pass does.
func importArchive(t *testing.T, rt *fake.Runtime, path string, data []byte) runtime.ImportResult {
	t.Helper()
	ctx := context.Background()
	res, err := importer.Import(ctx, rt.ImportStore(), runtime.ImportRequest{Source: path, Identity: "id-" + path,
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }})
	if err != nil {
		t.Fatalf("importing %s: %v", path, err)
	}
	for _, w := range res.Images {
		if _, err := rt.Pin(ctx, w, runtime.FirstPin(true)); err != nil {
			t.Fatal(err)
		}
	}
	return res
}

func ociArchive(t *testing.T, opts fixture.OCIOptions, imgs ...*fixture.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := fixture.WriteOCI(context.Background(), &buf, opts, imgs...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func export(t *testing.T, rt *fake.Runtime, sel exporter.Selection) ([]byte, *exporter.Plan) {
	t.Helper()
	b, p, err := tryExport(rt, sel)
	if err != nil {
		t.Fatal(err)
	}
	return b, p
}

func tryExport(rt *fake.Runtime, sel exporter.Selection) ([]byte, *exporter.Plan, error) {
	ctx := context.Background()
	p, err := exporter.Prepare(ctx, rt, rt.ImportStore(), sel)
	if err != nil {
		return nil, nil, err
	}
	var buf bytes.Buffer
	if _, err := p.Write(ctx, &buf, exporter.WriteOptions{}); err != nil {
		return nil, p, err
	}
	return buf.Bytes(), p, nil
}

func patterns(t *testing.T, ss ...string) []pattern.Pattern {
	t.Helper()
	var out []pattern.Pattern
	for _, s := range ss {
		p, err := pattern.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// archiveFile is one entry of an exported tar.
type archiveFile struct {
	hdr  tar.Header
	data []byte
}

func readTar(t *testing.T, b []byte) []archiveFile {
	t.Helper()
	var out []archiveFile
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, archiveFile{*h, data})
	}
}

func fileNamed(files []archiveFile, name string) ([]byte, bool) {
	for _, f := range files {
		if f.hdr.Name == name {
			return f.data, true
		}
	}
	return nil, false
}

// wantsOf are the name -> target digest of an import's images.
func wantsOf(ws []runtime.Want) map[string]digest.Digest {
	out := map[string]digest.Digest{}
	for _, w := range ws {
		out[w.Name] = w.Target.Digest
	}
	return out
}

// TestExportRoundTrip: two images, one of two platforms, sharing a layer,
// exported by pattern: the tar holds oci-layout, index.json, manifest.json
// and each blob once; index.json names each name as containerd's exporter
// does; manifest.json gives the host platform's config and layers; and the
// import reads back the same names at the same digests.
func TestExportRoundTrip(t *testing.T) {
	ctx := context.Background()
	shared, err := fixture.NewLayer(ctx, fixture.LayerSpec{Size: 40 << 10, Seed: 99}, fixture.Gzip)
	if err != nil {
		t.Fatal(err)
	}
	multi := build(t, fixture.ImageSpec{Names: []string{"example.com/team/multi:1"}, Platforms: []fixture.Platform{fixture.HostPlatform(), otherPlatform()},
		SharedLayers: []*fixture.Layer{shared}, Layers: fixture.UniformLayers(1, 16<<10, false, 1), LayerCompression: fixture.Gzip})
	single := build(t, fixture.ImageSpec{Names: []string{"docker.io/library/single:2"},
		SharedLayers: []*fixture.Layer{shared}, Layers: fixture.UniformLayers(1, 16<<10, false, 2), LayerCompression: fixture.Gzip})
	rt := fake.New()
	src := importArchive(t, rt, "/images/both.tar", ociArchive(t, fixture.OCIOptions{}, multi, single))
	// The host platform's manifest of multi under a name of its own:
	// manifest.json then names one manifest for two images.
	hostOnly := runtime.Want{Name: "example.com/team/multi:host", Target: multi.ManifestFor(fixture.HostPlatform()).Descriptor}
	hostOnly.Target.Platform = nil
	if _, err := rt.Pin(ctx, hostOnly, runtime.FirstPin(true)); err != nil {
		t.Fatal(err)
	}
	dn, _ := importer.DigestName(hostOnly.Name, hostOnly.Target.Digest)
	src.Images = append(src.Images, hostOnly, runtime.Want{Name: dn, Target: hostOnly.Target})

	out, p := export(t, rt, exporter.Selection{Patterns: patterns(t, "example.com/team/*", "single")})
	files := readTar(t, out)
	var names []string
	for _, f := range files {
		names = append(names, f.hdr.Name)
	}
	if len(names) < 5 || names[0] != "oci-layout" || names[1] != "index.json" || names[2] != "manifest.json" || names[3] != "blobs/" || names[4] != "blobs/sha256/" {
		t.Fatalf("entries %v: want oci-layout, index.json, manifest.json, blobs/, blobs/sha256/ first", names)
	}
	blobs := names[5:]
	if !slices.IsSorted(blobs) || len(slices.Compact(slices.Clone(blobs))) != len(blobs) {
		t.Errorf("blobs %v: want each once, sorted", blobs)
	}
	if n := strings.Count(strings.Join(blobs, "\n"), shared.Digest().Encoded()); n != 1 {
		t.Errorf("the shared layer is written %d times", n)
	}
	if p.Blobs != len(blobs) {
		t.Errorf("plan counts %d blobs, the tar holds %d", p.Blobs, len(blobs))
	}
	raw, _ := fileNamed(files, "index.json")
	var idx ocispec.Index
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range idx.Manifests {
		got[d.Annotations[oci.AnnotationImageName]] = d.Annotations[oci.AnnotationRefName]
	}
	for name, want := range map[string]string{"example.com/team/multi:1": "1", "docker.io/library/single:2": "2"} {
		if got[name] != want {
			t.Errorf("index.json names %v; want %s with ref.name %s", got, name, want)
		}
	}
	raw, _ = fileNamed(files, "manifest.json")
	var dm []struct {
		Config           string
		RepoTags, Layers []string
	}
	if err := json.Unmarshal(raw, &dm); err != nil {
		t.Fatal(err)
	}
	host := multi.ManifestFor(fixture.HostPlatform())
	if len(dm) != 2 || !slices.Equal(dm[0].RepoTags, []string{"example.com/team/multi:1", "example.com/team/multi:host"}) || dm[0].Config != "blobs/sha256/"+host.Config.Digest.Encoded() ||
		dm[1].RepoTags[0] != "single:2" || len(dm[0].Layers) != 2 {
		t.Errorf("manifest.json %+v: want the host platform's manifest of multi, then single:2", dm)
	}

	back := fake.New()
	res := importArchive(t, back, "/images/export.tar", out)
	if !equalWants(wantsOf(src.Images), wantsOf(res.Images)) {
		t.Errorf("imported again: %v; exported from %v", wantsOf(res.Images), wantsOf(src.Images))
	}
	if res.Format != "docker-hybrid" {
		t.Errorf("read as %s", res.Format)
	}
}

func equalWants(a, b map[string]digest.Digest) bool {
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

// TestExportSelection: patterns match any record but the CRI's and
// cosign's; --source takes a source's wants; --all takes what holdfast
// pins and nothing else; a pattern or a source that gives nothing is an
// error naming it.
func TestExportSelection(t *testing.T) {
	ctx := context.Background()
	a := build(t, fixture.ImageSpec{Names: []string{"example.com/a:1"}, Layers: fixture.UniformLayers(1, 4<<10, false, 11)})
	b := build(t, fixture.ImageSpec{Names: []string{"example.com/b:1"}, Layers: fixture.UniformLayers(1, 4<<10, false, 12)})
	c := build(t, fixture.ImageSpec{Names: []string{"example.com/c:1"}, Layers: fixture.UniformLayers(1, 4<<10, false, 13)})
	rt := fake.New()
	importArchive(t, rt, "/images/a.tar", ociArchive(t, fixture.OCIOptions{}, a))
	importArchive(t, rt, "/images/b.tar", ociArchive(t, fixture.OCIOptions{}, b))
	// c: in the store, not pinned by holdfast (a pull by someone else).
	content, err := c.Content(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rt.PutContent(content)
	rt.Create(runtime.Image{Name: "example.com/c:1", Target: c.Target})
	rt.Create(runtime.Image{Name: "sha256:" + c.ManifestFor(fixture.HostPlatform()).Config.Digest.Encoded(), Target: c.Target})
	rt.Create(runtime.Image{Name: "example.com/c:sha256-" + c.Target.Digest.Encoded() + ".sig", Target: c.Target})

	names := func(sel exporter.Selection) []string {
		t.Helper()
		_, p := export(t, rt, sel)
		var out []string
		for _, img := range p.Images {
			out = append(out, img.Name)
		}
		return out
	}
	if got := names(exporter.Selection{Patterns: patterns(t, "example.com/c")}); !slices.Equal(got, []string{"example.com/c:1"}) {
		t.Errorf("pattern example.com/c: %v", got)
	}
	if got := names(exporter.Selection{Sources: []string{"/images/b.tar"}}); len(got) != 2 || got[0] != "example.com/b:1" || !strings.HasPrefix(got[1], "example.com/b@sha256:") {
		t.Errorf("--source /images/b.tar: %v", got)
	}
	got := names(exporter.Selection{All: true})
	if len(got) != 4 || slices.ContainsFunc(got, func(n string) bool { return strings.Contains(n, "/c") }) {
		t.Errorf("--all: %v; want a and b with their digest names, not c", got)
	}
	for _, sel := range []exporter.Selection{
		{Patterns: patterns(t, "example.com/zzz")},
		{Sources: []string{"/images/none.tar"}},
	} {
		_, _, err := tryExport(rt, sel)
		if err == nil || !(strings.Contains(err.Error(), "zzz") || strings.Contains(err.Error(), "none.tar")) {
			t.Errorf("%+v: error %v, want one naming what gave nothing", sel, err)
		}
	}
}

// TestExportDeterministic: the same images give the same bytes, however
// the store came to hold them.
func TestExportDeterministic(t *testing.T) {
	a := build(t, fixture.ImageSpec{Names: []string{"example.com/a:1"}, Platforms: []fixture.Platform{fixture.HostPlatform(), otherPlatform()}, Layers: fixture.UniformLayers(2, 8<<10, true, 21)})
	b := build(t, fixture.ImageSpec{Names: []string{"example.com/b:1", "example.com/b:latest"}, Layers: fixture.UniformLayers(2, 8<<10, false, 22)})
	one := fake.New()
	importArchive(t, one, "/images/a.tar", ociArchive(t, fixture.OCIOptions{}, a))
	importArchive(t, one, "/images/b.tar", ociArchive(t, fixture.OCIOptions{Names: fixture.NameOCIFull}, b))
	two := fake.New()
	importArchive(t, two, "/other/both.tar", ociArchive(t, fixture.OCIOptions{IndexLast: true}, b, a))
	sel := exporter.Selection{Patterns: patterns(t, "example.com/*")}
	first, _ := export(t, one, sel)
	again, _ := export(t, one, sel)
	other, _ := export(t, two, exporter.Selection{All: true})
	if !bytes.Equal(first, again) || !bytes.Equal(first, other) {
		t.Fatalf("the same images gave different bytes (%d, %d, %d)", len(first), len(again), len(other))
	}
	for _, f := range readTar(t, first) {
		h := f.hdr
		if h.ModTime.Unix() != 0 || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || (h.Mode != 0o644 && h.Mode != 0o755) {
			t.Errorf("%s: mtime %v, owner %d:%d %q:%q, mode %o", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname, h.Mode)
		}
	}
}

// TestExportPartialMultiPlatform: an image whose other platform's blobs
// are not in the store (a node holds its own) exports its index and the
// host platform; the export is imported again as it was.
func TestExportPartialMultiPlatform(t *testing.T) {
	img := build(t, fixture.ImageSpec{Names: []string{"example.com/partial:1"}, Platforms: []fixture.Platform{fixture.HostPlatform(), otherPlatform()},
		OmitPlatforms: []fixture.Platform{otherPlatform()}, Layers: fixture.UniformLayers(2, 8<<10, false, 31)})
	rt := fake.New()
	src := importArchive(t, rt, "/images/partial.tar", ociArchive(t, fixture.OCIOptions{}, img))
	out, p := export(t, rt, exporter.Selection{Patterns: patterns(t, "example.com/partial")})
	if len(p.LeftOut) != 1 || !strings.Contains(p.LeftOut[0], img.ManifestFor(otherPlatform()).Descriptor.Digest.String()) {
		t.Errorf("left out %v; want the other platform's manifest", p.LeftOut)
	}
	files := readTar(t, out)
	if _, ok := fileNamed(files, "blobs/sha256/"+img.ManifestFor(otherPlatform()).Config.Digest.Encoded()); ok {
		t.Error("the other platform's config is written, which the store does not hold")
	}
	if _, ok := fileNamed(files, "blobs/sha256/"+img.Target.Digest.Encoded()); !ok {
		t.Error("the index is not written")
	}
	back := fake.New()
	res := importArchive(t, back, "/images/export.tar", out)
	if !equalWants(wantsOf(src.Images), wantsOf(res.Images)) {
		t.Errorf("imported again: %v; exported from %v", wantsOf(res.Images), wantsOf(src.Images))
	}
}

// TestExportMissingBlob: an image whose host-platform layer is gone from
// the store is an error naming the image and the blob, before anything is
// written.
func TestExportMissingBlob(t *testing.T) {
	img := build(t, fixture.ImageSpec{Names: []string{"example.com/lost:1"}, Layers: fixture.UniformLayers(2, 8<<10, false, 41)})
	rt := fake.New()
	importArchive(t, rt, "/images/lost.tar", ociArchive(t, fixture.OCIOptions{}, img))
	layer := img.ManifestFor(fixture.HostPlatform()).Layers[1].Digest()
	rt.DeleteBlob(layer)
	_, p, err := tryExport(rt, exporter.Selection{All: true})
	if err == nil || p != nil || !strings.Contains(err.Error(), "example.com/lost:1") || !strings.Contains(err.Error(), layer.String()) {
		t.Fatalf("error %v; want one naming the image and %s", err, layer)
	}
}

// TestExportSignatures: the signatures a source carried (a haul's .sig
// manifests and sigstore bundle referrers) come along: a .sig tag of the
// image's repository, a referrer marked with its subject; the import
// finds and keeps them again.
func TestExportSignatures(t *testing.T) {
	img := build(t, fixture.ImageSpec{Names: []string{"docker.io/library/signed:1"}, Layers: fixture.UniformLayers(1, 8<<10, false, 51)})
	var haul bytes.Buffer
	if err := fixture.WriteHaul(context.Background(), &haul, fixture.HaulOptions{Signatures: true, Referrers: true}, img); err != nil {
		t.Fatal(err)
	}
	rt := fake.New()
	src := importArchive(t, rt, "/images/signed.haul.tar", haul.Bytes())
	kept := src.State.Signatures[img.Target.Digest]
	if len(kept) < 2 {
		t.Fatalf("the haul's import kept %v; the test wants a .sig and a referrer", kept)
	}
	out, p := export(t, rt, exporter.Selection{Patterns: patterns(t, "signed")})
	if p.Signatures != 2 || len(p.Warnings) > 0 {
		t.Errorf("%d signatures, warnings %v; want 2 and none", p.Signatures, p.Warnings)
	}
	raw, _ := fileNamed(readTar(t, out), "index.json")
	var idx ocispec.Index
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	tag, referrer := false, false
	for _, d := range idx.Manifests {
		switch {
		case d.Annotations[oci.AnnotationImageName] == "docker.io/library/signed:sha256-"+img.Target.Digest.Encoded()+".sig":
			tag = true
		case d.Annotations[oci.AnnotationManifestSubject] == img.Target.Digest.String():
			referrer = d.Annotations[oci.AnnotationImageName] == ""
		}
	}
	if !tag || !referrer {
		t.Errorf("index.json %s: want the .sig tag and an unnamed referrer of %s", raw, img.Target.Digest)
	}
	back := fake.New()
	res := importArchive(t, back, "/images/export.tar", out)
	again := res.State.Signatures[img.Target.Digest]
	var want, got []digest.Digest
	for _, d := range kept {
		want = append(want, d.Digest)
	}
	for _, d := range again {
		got = append(got, d.Digest)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(slices.Compact(want), slices.Compact(got)) {
		t.Errorf("imported again with signatures %v; exported %v", got, want)
	}
	if !equalWants(wantsOf(src.Images), wantsOf(res.Images)) {
		t.Errorf("imported again: %v; exported from %v", wantsOf(res.Images), wantsOf(src.Images))
	}
}

// TestExportBlobChangedUnderneath: a blob whose bytes are not what its
// digest says fails the write.
func TestExportBlobChangedUnderneath(t *testing.T) {
	img := build(t, fixture.ImageSpec{Names: []string{"example.com/bad:1"}, Layers: fixture.UniformLayers(1, 8<<10, false, 61)})
	rt := fake.New()
	importArchive(t, rt, "/images/bad.tar", ociArchive(t, fixture.OCIOptions{}, img))
	layer := img.ManifestFor(fixture.HostPlatform()).Layers[0]
	bad := bytes.Repeat([]byte{'x'}, int(layer.Size()))
	rt.PutContent(map[digest.Digest][]byte{layer.Digest(): bad})
	_, _, err := tryExport(rt, exporter.Selection{All: true})
	if err == nil || !strings.Contains(err.Error(), layer.Digest().String()) {
		t.Fatalf("error %v; want one naming %s", err, layer.Digest())
	}
	if errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
}

// TestExportSignatureRecord: a signature the store holds as a record named
// with cosign's tag of the image (a pull of <repo>:sha256-<hex>.sig), which
// no source lists, comes along too, and the import keeps it.
func TestExportSignatureRecord(t *testing.T) {
	img := build(t, fixture.ImageSpec{Names: []string{"example.com/pulled:1"}, Layers: fixture.UniformLayers(1, 8<<10, false, 71)})
	rt := fake.New()
	importArchive(t, rt, "/images/pulled.tar", ociArchive(t, fixture.OCIOptions{}, img))
	sig := putSignatureRecord(t, rt, "example.com/pulled", img.Target.Digest)

	out, p := export(t, rt, exporter.Selection{Patterns: patterns(t, "example.com/pulled")})
	if p.Signatures != 1 || len(p.Images) != 2 {
		t.Fatalf("%d signatures, images %v; want the record's signature beside the image and its digest name", p.Signatures, p.Images)
	}
	res := importArchive(t, fake.New(), "/images/export.tar", out)
	if got := res.State.Signatures[img.Target.Digest]; len(got) != 1 || got[0].Digest != sig.Descriptor.Digest {
		t.Errorf("imported again with signatures %v; want %s", got, sig.Descriptor.Digest)
	}
}

// putSignatureRecord puts a cosign signature of image into rt's store and
// names it as a pull of cosign's tag would: <repo>:sha256-<hex>.sig, a
// record no source lists.
func putSignatureRecord(t *testing.T, rt *fake.Runtime, repo string, image digest.Digest) fixture.Artifact {
	t.Helper()
	sig, err := fixture.SignedCosignSignature(repo, image, func([]byte) (string, error) { return "c2lnbmF0dXJl", nil })
	if err != nil {
		t.Fatal(err)
	}
	content := map[digest.Digest][]byte{}
	for _, b := range sig.Blobs {
		content[digest.FromBytes(b)] = b
	}
	rt.PutContent(content)
	target := sig.Descriptor
	target.Annotations = nil
	rt.Create(runtime.Image{Name: repo + ":sha256-" + image.Encoded() + ".sig", Target: target})
	return sig
}

package exporter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/exporter"
	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
)

// requireWhole fails t unless every index and manifest among the blobs of
// the exported tar names only blobs the tar holds (an index's manifests
// aside: other platforms may be left out), and every index.json entry is
// in it.
func requireWhole(t *testing.T, out []byte) {
	t.Helper()
	blobs := map[digest.Digest][]byte{}
	for _, f := range readTar(t, out) {
		if hex, ok := strings.CutPrefix(f.hdr.Name, "blobs/sha256/"); ok {
			blobs[digest.NewDigestFromEncoded(digest.SHA256, hex)] = f.data
		}
	}
	raw, _ := fileNamed(readTar(t, out), "index.json")
	var idx ocispec.Index
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	for _, e := range idx.Manifests {
		if _, ok := blobs[e.Digest]; !ok {
			t.Errorf("index.json names %s, which the archive does not hold", e.Digest)
		}
	}
	for d, b := range blobs {
		var m ocispec.Manifest
		if json.Unmarshal(b, &m) != nil || !oci.IsManifest(m.MediaType) {
			continue
		}
		for _, c := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
			if _, ok := blobs[c.Digest]; !ok {
				t.Errorf("manifest %s names %s %s, which the archive does not hold", d, c.MediaType, c.Digest)
			}
		}
	}
}

// signedSource imports a haul of a signed image (a .sig and .att manifest
// and a bundle referrer) into a fresh fake.
func signedSource(t *testing.T, name string, seed int64) (*fake.Runtime, *fixture.Image, runtime.ImportResult) {
	t.Helper()
	img := build(t, fixture.ImageSpec{Names: []string{name}, Layers: fixture.UniformLayers(1, 8<<10, false, seed)})
	var haul bytes.Buffer
	if err := fixture.WriteHaul(context.Background(), &haul, fixture.HaulOptions{Signatures: true, Referrers: true}, img); err != nil {
		t.Fatal(err)
	}
	rt := fake.New()
	return rt, img, importArchive(t, rt, "/images/signed.haul.tar", haul.Bytes())
}

// TestExportSignedIsWhole: the export of an image imported with its
// signatures holds every blob each of its manifests names, the signature
// manifests' configs included.
func TestExportSignedIsWhole(t *testing.T) {
	rt, _, _ := signedSource(t, "docker.io/library/whole:1", 81)
	out, p := export(t, rt, exporter.Selection{Patterns: patterns(t, "whole")})
	if p.Signatures != 2 {
		t.Errorf("%d signatures; want the .sig and the referrer", p.Signatures)
	}
	requireWhole(t, out)
}

// TestExportSignatureConfigLost: a signature manifest whose config the
// store does not hold (a source kept before holdfast kept signature
// configs, or a blob removed by hand) fails the export, naming the image,
// the manifest and the config, rather than writing an archive whose
// manifest names a blob it does not hold.
func TestExportSignatureConfigLost(t *testing.T) {
	rt, img, src := signedSource(t, "docker.io/library/lost-config:1", 82)
	sig := src.State.Signatures[img.Target.Digest][0]
	raw, err := rt.ImportStore().ReadBlob(context.Background(), sig)
	if err != nil {
		t.Fatal(err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	rt.DeleteBlob(m.Config.Digest)
	out, p, err := tryExport(rt, exporter.Selection{Patterns: patterns(t, "lost-config")})
	if err == nil {
		requireWhole(t, out)
		t.Fatalf("the export succeeded (%d signatures, warnings %v); want an error naming the image, %s and %s", p.Signatures, p.Warnings, sig.Digest, m.Config.Digest)
	}
	t.Logf("export: %v", err)
	for _, want := range []string{"docker.io/library/lost-config:1", sig.Digest.String(), m.Config.Digest.String(), "not in the store"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

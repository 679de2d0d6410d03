package archive

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
)

// TestDiscardPut: Discard reads a blob through and checks it: its size and
// its digest when one is expected, and computes it otherwise.
func TestDiscardPut(t *testing.T) {
	ctx := context.Background()
	data := []byte("a blob")
	d := digest.FromBytes(data)
	for _, tc := range []struct {
		name     string
		expected digest.Digest
		size     int64
		want     string // error
	}{
		{"expected", d, int64(len(data)), ""},
		{"computed", "", int64(len(data)), ""},
		{"other digest", digest.FromString("another blob"), int64(len(data)), "content has digest " + d.String()},
		{"shorter", d, int64(len(data)) + 1, "6 bytes, expected 7"},
		{"longer", d, int64(len(data)) - 1, "6 bytes, expected 5"},
		{"bad digest", "sha256:nothex", int64(len(data)), "invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Discard.Put(ctx, tc.expected, tc.size, bytes.NewReader(data))
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Put: %v, %v; want an error saying %q", got, err, tc.want)
				}
				return
			}
			if err != nil || got != d {
				t.Fatalf("Put: %v, %v; want %s", got, err, d)
			}
		})
	}
	boom := errors.New("boom")
	if _, err := Discard.Put(ctx, d, int64(len(data)), iotest.ErrReader(boom)); !errors.Is(err, boom) {
		t.Errorf("Put of a failing reader: %v", err)
	}
	if has, err := Discard.Has(ctx, d); has || err != nil {
		t.Errorf("Has: %v, %v; want false", has, err)
	}
}

// TestDiscardWalk: a walk into Discard finds what a walk into a store does
// and keeps the documents; a blob whose content is not its digest fails it.
func TestDiscardWalk(t *testing.T) {
	app, multi := bundleImages(t)
	var tarball bytes.Buffer
	if err := fixture.WriteOCI(context.Background(), &tarball, fixture.OCIOptions{}, app, multi); err != nil {
		t.Fatal(err)
	}
	want, err := Walk(context.Background(), bytes.NewReader(tarball.Bytes()), newMemStore())
	if err != nil {
		t.Fatal(err)
	}
	got, err := Walk(context.Background(), bytes.NewReader(tarball.Bytes()), Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(foundNames(got), foundNames(want)) || len(got.Docs) != len(want.Docs) || len(got.Blobs) != len(want.Blobs) {
		t.Errorf("into Discard: images %v, %d docs, %d blobs; into a store: %v, %d, %d",
			foundNames(got), len(got.Docs), len(got.Blobs), foundNames(want), len(want.Docs), len(want.Blobs))
	}

	var layer bytes.Buffer
	if err := app.Manifests[0].Layers[0].WriteBlob(context.Background(), &layer); err != nil {
		t.Fatal(err)
	}
	b := bytes.Clone(tarball.Bytes())
	i := bytes.Index(b, layer.Bytes())
	if i < 0 {
		t.Fatal("layer not found in the archive")
	}
	b[i+layer.Len()/2] ^= 0xff
	_, err = Walk(context.Background(), bytes.NewReader(b), Discard)
	if err == nil || !strings.Contains(err.Error(), "content has digest") {
		t.Fatalf("walk of a corrupt layer: %v", err)
	}
}

// TestOCICosignTags: an OCI archive that carries cosign's signature and
// attestation manifests tagged <repo>:sha256-<hex>.sig and .att beside the
// image (a repository copied with all its tags) skips them, named, rather
// than taking them for images: their config names no OS, and their layers
// are no filesystem layers.
func TestOCICosignTags(t *testing.T) {
	app, _ := bundleImages(t)
	repo := "docker.io/library/nginx"
	tag := repo + ":sha256-" + app.Target.Digest.Encoded()
	sig := sigtest.Legacy(t, repo, app.Target.Digest, sigtest.NewKey(t))
	att := sigtest.Legacy(t, repo, app.Target.Digest, sigtest.NewKey(t)) // the kind of layer does not matter here
	withName := func(m sigtest.Manifest, name string) fixture.Artifact {
		d := m.Descriptor
		d.Annotations = map[string]string{ocispec.AnnotationRefName: name}
		return fixture.Artifact{Descriptor: d, Blobs: m.Bytes()}
	}
	var tarball bytes.Buffer
	err := fixture.WriteOCI(context.Background(), &tarball, fixture.OCIOptions{Artifacts: []fixture.Artifact{
		withName(sig, tag+".sig"), withName(att, tag+".att"),
	}}, app)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Walk(context.Background(), &tarball, newMemStore())
	if err != nil {
		t.Fatal(err)
	}
	if got := names(res); !slices.Equal(got, []string{"docker.io/library/nginx:1.25"}) {
		t.Errorf("images %v", got)
	}
	wantSkipped := []Skipped{
		{Digest: sig.Descriptor.Digest, MediaType: sig.Descriptor.MediaType, Size: sig.Descriptor.Size, Name: tag + ".sig", Reason: "signature"},
		{Digest: att.Descriptor.Digest, MediaType: att.Descriptor.MediaType, Size: att.Descriptor.Size, Name: tag + ".att", Reason: "attestation"},
	}
	if !slices.Equal(res.Skipped, wantSkipped) {
		t.Errorf("skipped %v, want %v", res.Skipped, wantSkipped)
	}
	if _, ok := res.Docs[sig.Descriptor.Digest]; !ok {
		t.Error("the signature manifest is not among the documents")
	}
}

// TestReadSkipped: a layout directory's walk leaves the entries it skips
// unread, unless told to read them.
func TestReadSkipped(t *testing.T) {
	app, _ := bundleImages(t)
	dir := t.TempDir()
	if err := fixture.WriteCosignDir(context.Background(), dir, app, true); err != nil {
		t.Fatal(err)
	}
	for _, read := range []bool{false, true} {
		res, err := WalkDirWith(context.Background(), dir, Discard, WalkOptions{Name: "registry.example.com/signed/app:1", ReadSkipped: read})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Skipped) != 2 || len(res.Images) != 1 {
			t.Fatalf("ReadSkipped %v: images %v, skipped %v", read, foundNames(res), res.Skipped)
		}
		for _, s := range res.Skipped {
			if _, ok := res.Docs[s.Digest]; ok != read {
				t.Errorf("ReadSkipped %v: the %s manifest among the documents: %v", read, s.Reason, ok)
			}
		}
	}
}

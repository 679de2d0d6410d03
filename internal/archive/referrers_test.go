package archive

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// referrerBlobs is the referrer cosign v3 pushes for a bundle of subject,
// as blobs: its manifest first, then its config and the bundle.
func referrerBlobs(t testing.TB, subject ocispec.Descriptor, bundle string) []blob {
	t.Helper()
	a, err := fixture.BundleReferrer(subject, []byte(bundle))
	if err != nil {
		t.Fatal(err)
	}
	var out []blob
	for _, b := range a.Blobs {
		out = append(out, blob{data: b})
	}
	out[0].mt = ocispec.MediaTypeImageManifest
	return out
}

// unlistedLayout is a layout whose index.json lists one image, app, and
// whose blobs also hold, unlisted: a referrer of app (ours), a referrer of
// an image the archive does not hold, a referrer of app larger than
// scanSize, and garbage (random bytes, a JSON object that does not parse).
type unlistedLayout struct {
	app                 image
	index               []byte
	ours, foreign, huge []blob
	garbage             []blob
}

func newUnlistedLayout(t *testing.T) unlistedLayout {
	l := unlistedLayout{app: makeImage(t, "amd64", None, "bin/sh")}
	l.index = indexJSON(t, withAnnotations(l.app.manifest.desc(), annotationContainerdName, "docker.io/library/app:1"))
	l.ours = referrerBlobs(t, l.app.manifest.desc(), `{"bundle":"ours"}`)
	other := makeImage(t, "arm64", None, "bin/other")
	l.foreign = referrerBlobs(t, other.manifest.desc(), `{"bundle":"foreign"}`)
	l.huge = referrerBlobs(t, l.app.manifest.desc(), `{"bundle":"huge"}`)
	var m ocispec.Manifest
	if err := json.Unmarshal(l.huge[0].data, &m); err != nil {
		t.Fatal(err)
	}
	m.Annotations["padding"] = strings.Repeat("x", int(defaultLimits().scanSize))
	l.huge[0].data = jsonBytes(t, m)
	l.garbage = []blob{randomLayer(512, 7), {data: []byte(`{"subject": {"digest": "` + string(l.app.manifest.digest()) + `"`)}}
	return l
}

func (l unlistedLayout) blobs() []blob {
	return slices.Concat(l.app.blobs(), l.ours, l.foreign, l.huge, l.garbage)
}

// checkUnlisted checks that res found ours, and only ours, as a referrer,
// with its manifest and bundle among the documents.
func (l unlistedLayout) checkUnlisted(t *testing.T, res *Result) {
	t.Helper()
	if got := names(res); !slices.Equal(got, []string{"docker.io/library/app:1"}) {
		t.Errorf("images %v", got)
	}
	m := l.ours[0].desc()
	want := []Skipped{{Digest: m.Digest, MediaType: ocispec.MediaTypeImageManifest, Size: m.Size, Reason: "referrer"}}
	if !slices.Equal(res.Skipped, want) {
		t.Errorf("skipped %+v, want %+v", res.Skipped, want)
	}
	for _, b := range []blob{l.ours[0], l.ours[2]} {
		if got, ok := res.Docs[b.digest()]; !ok || !bytes.Equal(got, b.data) {
			t.Errorf("%s (%.40s) is not among the documents", b.digest(), b.data)
		}
	}
}

// TestUnlistedReferrersTar: a tar's walk finds a referrer index.json does
// not list among its documents, when its subject is one of the archive's
// images; one of an image the archive does not hold, one larger than a
// referrer may be, and garbage are passed over.
func TestUnlistedReferrersTar(t *testing.T) {
	l := newUnlistedLayout(t)
	tarball := tarBytes(t, ociEntries("", l.index, l.blobs()...))
	for _, conc := range []int{1, 4} {
		t.Run(fmt.Sprint("concurrency ", conc), func(t *testing.T) {
			res, err := WalkWith(context.Background(), bytes.NewReader(tarball), newMemStore(), WalkOptions{Concurrency: conc})
			if err != nil {
				t.Fatal(err)
			}
			l.checkUnlisted(t, res)
		})
	}
}

// TestUnlistedReferrersDir: a layout dir's walk (reading what it skips, as
// every import does) finds a referrer index.json does not list among the
// blobs nothing reached, and reads its bundle; it passes over one of an
// image the dir does not hold, one larger than a referrer may be (unread),
// garbage, and a referrer of the image that is a symlink in blobs/ (to a
// file outside the dir or inside it): never followed, and no error. Without
// ReadSkipped the blobs nothing reached are not looked at.
func TestUnlistedReferrersDir(t *testing.T) {
	l := newUnlistedLayout(t)
	root := t.TempDir()
	dir, outside := filepath.Join(root, "layout"), filepath.Join(root, "outside")
	writeLayout(t, dir, l.index, l.blobs()...)
	linked := referrerBlobs(t, l.app.manifest.desc(), `{"bundle":"linked out"}`)
	inside := referrerBlobs(t, l.app.manifest.desc(), `{"bundle":"linked in"}`)
	writeLayout(t, outside, indexJSON(t), linked...)
	for _, b := range linked {
		relink(t, filepath.Join(outside, "blobs", "sha256", b.digest().Encoded()), filepath.Join(dir, "blobs", "sha256", b.digest().Encoded()))
	}
	for _, b := range inside {
		if err := os.WriteFile(filepath.Join(dir, b.digest().Encoded()), b.data, 0o644); err != nil {
			t.Fatal(err)
		}
		relink(t, "../../"+b.digest().Encoded(), filepath.Join(dir, "blobs", "sha256", b.digest().Encoded()))
	}
	for _, conc := range []int{1, 4} {
		t.Run(fmt.Sprint("concurrency ", conc), func(t *testing.T) {
			st := newMemStore()
			res, err := WalkDirWith(context.Background(), dir, st, WalkOptions{Concurrency: conc, ReadSkipped: true})
			if err != nil {
				t.Fatal(err)
			}
			l.checkUnlisted(t, res)
			// Their manifests and bundles (the config, {}, is ours' too).
			for _, b := range []blob{l.foreign[0], l.foreign[2], l.huge[0], l.huge[2], l.garbage[0], l.garbage[1], linked[0], linked[2], inside[0], inside[2]} {
				if _, ok := res.Docs[b.digest()]; ok {
					t.Errorf("%s (%.40s), no referrer of the layout's images, is among the documents", b.digest(), b.data)
				}
			}
		})
	}
	res, err := WalkDirWith(context.Background(), dir, newMemStore(), WalkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Skipped) != 0 {
		t.Errorf("without ReadSkipped, skipped %+v", res.Skipped)
	}
}

// TestUnlistedReferrersDirBounded: the blobs a layout dir's scan looks at
// count as entries: a dir of more blobs than the limit is refused, naming
// it.
func TestUnlistedReferrersDirBounded(t *testing.T) {
	l := newUnlistedLayout(t)
	dir := t.TempDir()
	writeLayout(t, dir, l.index, l.blobs()...)
	lim := defaultLimits()
	lim.entries = len(l.app.blobs()) + 3
	_, err := walkDir(context.Background(), dir, newMemStore(), WalkOptions{ReadSkipped: true}, lim)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("more than %d blobs", lim.entries)) {
		t.Fatalf("walk of a dir of %d blobs, limit %d: %v", len(l.blobs()), lim.entries, err)
	}
	lim.entries = len(l.blobs())
	if _, err := walkDir(context.Background(), dir, newMemStore(), WalkOptions{ReadSkipped: true}, lim); err != nil {
		t.Fatalf("walk of a dir of %d blobs, limit %d: %v", len(l.blobs()), lim.entries, err)
	}
}

// BenchmarkUnlistedReferrers: a layout of 20,000 small images, each with a
// referrer index.json does not list (the bundles are dummies: nothing is
// verified here). dir/scan is the scan alone (listing blobs/, reading the
// unreached blobs, finding the referrers among them) after the walk of
// what index.json reaches; tar/find is finding them among a tar's
// documents; dir/walk and tar/walk are the whole walks, as an import
// reads (ReadSkipped).
func BenchmarkUnlistedReferrers(b *testing.B) {
	const n = 20000
	dir := b.TempDir()
	layout, tarPath := filepath.Join(dir, "layout"), filepath.Join(dir, "layout.tar")
	cfg := fixture.ReferrersConfig{Count: n, Name: "example.com/bench/app:1", LayerSize: 512,
		Bundle: func(image digest.Digest) ([]byte, error) {
			return []byte(`{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","subject":"` + image + `"}`), nil
		}}
	if err := fixture.WriteUnlistedReferrers(b.Context(), cfg, layout, tarPath); err != nil {
		b.Fatal(err)
	}
	walkTar := func(b *testing.B) *Result {
		f, err := os.Open(tarPath)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		res, err := WalkWith(b.Context(), f, Discard, WalkOptions{ReadSkipped: true})
		if err != nil {
			b.Fatal(err)
		}
		return res
	}
	found := func(b *testing.B, skipped []Skipped) {
		if len(skipped) != n {
			b.Fatalf("%d referrers found, want %d", len(skipped), n)
		}
	}
	// A walker that has read what index.json reaches, as the walk of
	// res left it.
	reached := func(res *Result) *walker {
		w := newWalker(Discard, defaultLimits(), 1)
		for _, img := range res.Images {
			w.listed[img.Target.Digest], w.images[img.Target.Digest] = true, true
		}
		for d, doc := range res.Docs {
			if w.images[d] {
				w.docs[d] = doc
			}
		}
		return w
	}
	b.Run("dir/scan", func(b *testing.B) {
		res := walkTar(b)
		root, err := os.OpenRoot(layout)
		if err != nil {
			b.Fatal(err)
		}
		defer root.Close()
		// What the walk of index.json reaches: the images' manifests,
		// configs and layers.
		seen := map[digest.Digest]bool{}
		for _, img := range res.Images {
			var m ocispec.Manifest
			if err := json.Unmarshal(res.Docs[img.Target.Digest], &m); err != nil {
				b.Fatal(err)
			}
			seen[img.Target.Digest], seen[m.Config.Digest] = true, true
			for _, l := range m.Layers {
				seen[l.Digest] = true
			}
		}
		for b.Loop() {
			w := reached(res)
			dw := &dirWalker{w: w, root: root, seen: seen}
			if err := dw.scan(b.Context()); err != nil {
				b.Fatal(err)
			}
			w.addUnlistedReferrers()
			found(b, w.skipped)
		}
	})
	b.Run("tar/find", func(b *testing.B) {
		res := walkTar(b)
		w := reached(res)
		w.docs = res.Docs
		for b.Loop() {
			w.skipped = nil
			w.addUnlistedReferrers()
			found(b, w.skipped)
		}
	})
	b.Run("dir/walk", func(b *testing.B) {
		for b.Loop() {
			res, err := WalkDirWith(b.Context(), layout, Discard, WalkOptions{ReadSkipped: true})
			if err != nil {
				b.Fatal(err)
			}
			found(b, res.Skipped)
		}
	})
	b.Run("tar/walk", func(b *testing.B) {
		for b.Loop() {
			found(b, walkTar(b).Skipped)
		}
	})
}

package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dsnet/compress/bzip2"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/pierrec/lz4/v4"
	"github.com/ulikunitz/xz"

	"github.com/holdfast-project/holdfast/internal/oci"
)

// The annotations the tests name index entries with.
const (
	annotationContainerdName  = oci.AnnotationImageName
	annotationRefName         = oci.AnnotationRefName
	annotationManifestSubject = oci.AnnotationManifestSubject
)

// memStore is an in-memory Store that counts its calls. Its methods may run
// concurrently; read its fields once the walk has returned.
type memStore struct {
	mu         sync.Mutex
	blobs      map[digest.Digest][]byte
	present    map[digest.Digest]bool // blobs the store "has" without their bytes
	hasN       int
	puts       []digest.Digest // in call order
	putPresent []digest.Digest // Put calls for blobs in present
}

func newMemStore() *memStore {
	return &memStore{blobs: make(map[digest.Digest][]byte), present: make(map[digest.Digest]bool)}
}

func (s *memStore) Has(_ context.Context, d digest.Digest) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hasN++
	_, ok := s.blobs[d]
	return ok || s.present[d], nil
}

func (s *memStore) Put(_ context.Context, expected digest.Digest, size int64, r io.Reader) (digest.Digest, error) {
	b, err := io.ReadAll(io.LimitReader(r, size+1))
	if err != nil {
		return "", err
	}
	if int64(len(b)) != size {
		return "", fmt.Errorf("put: read %d bytes, expected %d", len(b), size)
	}
	d := digest.FromBytes(b)
	if expected != "" {
		d = expected.Algorithm().FromBytes(b)
		if d != expected {
			return "", fmt.Errorf("put: digest %s, expected %s", d, expected)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.present[d] {
		s.putPresent = append(s.putPresent, d)
		return d, nil
	}
	s.blobs[d] = b
	s.puts = append(s.puts, d)
	return d, nil
}

// overlapStore is a memStore whose Put calls wait, up to a deadline, until
// two of them run at once: a walk that writes blobs concurrently shows it
// without depending on the scheduler's luck.
type overlapStore struct {
	*memStore
	wait time.Duration // 0: do not wait

	mu     sync.Mutex
	active int
	both   chan struct{} // closed once two Put calls ran at once
}

func newOverlapStore(wait time.Duration) *overlapStore {
	return &overlapStore{memStore: newMemStore(), wait: wait, both: make(chan struct{})}
}

func (s *overlapStore) Put(ctx context.Context, expected digest.Digest, size int64, r io.Reader) (digest.Digest, error) {
	s.mu.Lock()
	s.active++
	if s.active == 2 && !s.overlapped() {
		close(s.both)
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.active--
		s.mu.Unlock()
	}()
	if s.wait > 0 {
		timer := time.NewTimer(s.wait)
		defer timer.Stop()
		select {
		case <-s.both:
		case <-timer.C:
		case <-ctx.Done():
		}
	}
	return s.memStore.Put(ctx, expected, size, r)
}

// overlapped reports whether two Put calls ever ran at once.
func (s *overlapStore) overlapped() bool {
	select {
	case <-s.both:
		return true
	default:
		return false
	}
}

// discardStore hashes what it must and keeps nothing.
type discardStore struct{}

func (discardStore) Has(context.Context, digest.Digest) (bool, error) { return false, nil }

func (discardStore) Put(_ context.Context, expected digest.Digest, size int64, r io.Reader) (digest.Digest, error) {
	if expected != "" {
		_, err := io.CopyN(io.Discard, r, size)
		return expected, err
	}
	dg := digest.Canonical.Digester()
	_, err := io.CopyN(dg.Hash(), r, size)
	return dg.Digest(), err
}

// entry is one member of a test tar.
type entry struct {
	name string
	data []byte
	typ  byte // 0: regular file
	link string
}

var epoch = time.Unix(1700000000, 0)

func tarBytes(t testing.TB, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, ModTime: epoch, Typeflag: e.typ, Linkname: e.link}
		switch e.typ {
		case 0:
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		case tar.TypeDir:
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// layerTar is a small filesystem layer: one file per name, holding its name.
func layerTar(t testing.TB, names ...string) []byte {
	var es []entry
	for _, n := range names {
		es = append(es, entry{name: n, data: []byte("content of " + n + "\n")})
	}
	return tarBytes(t, es)
}

func compress(t testing.TB, c Compression, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	var err error
	switch c {
	case None:
		return b
	case Gzip:
		w = gzip.NewWriter(&buf)
	case Zstd:
		w, err = zstd.NewWriter(&buf)
	case Xz:
		w, err = xz.NewWriter(&buf)
	case Lz4:
		w = lz4.NewWriter(&buf)
	case Bzip2:
		w, err = bzip2.NewWriter(&buf, &bzip2.WriterConfig{Level: 9})
	default:
		t.Fatalf("compress: %s", c)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// randomLayer is an uncompressed-looking layer blob of n random bytes.
func randomLayer(n int, seed uint64) blob {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return blob{ocispec.MediaTypeImageLayer, b}
}

// imageWith builds an image for linux/arch from layer blobs.
func imageWith(t testing.TB, arch string, layers ...blob) image {
	im := image{layers: layers}
	im.config = blob{ocispec.MediaTypeImageConfig, configJSON(t, "linux", arch)}
	im.manifest = blob{ocispec.MediaTypeImageManifest, manifestJSON(t, im.config, layers)}
	return im
}

// blob is a content-addressed test blob.
type blob struct {
	mt   string
	data []byte
}

func (b blob) desc() ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: b.mt, Digest: digest.FromBytes(b.data), Size: int64(len(b.data))}
}

func (b blob) digest() digest.Digest { return digest.FromBytes(b.data) }

func jsonBytes(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func configJSON(t testing.TB, os, arch string, diffIDs ...digest.Digest) []byte {
	return jsonBytes(t, map[string]any{
		"architecture": arch,
		"os":           os,
		"config":       map[string]any{"Env": []string{"PATH=/bin"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
}

// image is a test image: its config, layers and OCI manifest.
type image struct {
	config   blob
	layers   []blob
	manifest blob
}

// makeImage builds an image for linux/arch with one layer per name, each
// compressed with comp.
func makeImage(t testing.TB, arch string, comp Compression, layerNames ...string) image {
	t.Helper()
	var im image
	var diffIDs []digest.Digest
	for _, n := range layerNames {
		raw := layerTar(t, n)
		diffIDs = append(diffIDs, digest.FromBytes(raw))
		mt, _ := layerMediaType(comp)
		im.layers = append(im.layers, blob{mt: mt, data: compress(t, comp, raw)})
	}
	im.config = blob{mt: ocispec.MediaTypeImageConfig, data: configJSON(t, "linux", arch, diffIDs...)}
	im.manifest = blob{mt: ocispec.MediaTypeImageManifest, data: manifestJSON(t, im.config, im.layers)}
	return im
}

func manifestJSON(t testing.TB, config blob, layers []blob) []byte {
	m := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    config.desc(),
		Layers:    []ocispec.Descriptor{},
	}
	for _, l := range layers {
		m.Layers = append(m.Layers, l.desc())
	}
	return jsonBytes(t, m)
}

func (im image) blobs() []blob {
	return append([]blob{im.manifest, im.config}, im.layers...)
}

// indexJSON builds an OCI index of the descriptors.
func indexJSON(t testing.TB, descs ...ocispec.Descriptor) []byte {
	return jsonBytes(t, ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: descs,
	})
}

func withAnnotations(d ocispec.Descriptor, kv ...string) ocispec.Descriptor {
	d.Annotations = map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Annotations[kv[i]] = kv[i+1]
	}
	return d
}

func withPlatform(d ocispec.Descriptor, arch string) ocispec.Descriptor {
	d.Platform = &ocispec.Platform{OS: "linux", Architecture: arch}
	return d
}

// ociEntries lays out an OCI image layout: oci-layout, index.json, blobs, each
// name with prefix (e.g. "./").
func ociEntries(prefix string, index []byte, blobs ...blob) []entry {
	es := []entry{
		{name: prefix + "oci-layout", data: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{name: prefix + "blobs/", typ: tar.TypeDir},
		{name: prefix + "blobs/sha256/", typ: tar.TypeDir},
	}
	seen := map[digest.Digest]bool{}
	for _, b := range blobs {
		if seen[b.digest()] {
			continue
		}
		seen[b.digest()] = true
		es = append(es, entry{name: prefix + "blobs/sha256/" + b.digest().Encoded(), data: b.data})
	}
	return append(es, entry{name: prefix + "index.json", data: index})
}

// dockerSaveEntries lays out images as docker save (< 25) does:
// <id>/layer.tar, <id>/json, <id>/VERSION, <config hex>.json, manifest.json,
// repositories. The layers of the images must be uncompressed.
func dockerSaveEntries(t testing.TB, manifestFirst bool, ims []image, repoTags [][]string) []entry {
	var es, files []entry
	var mj []dockerImage
	for i, im := range ims {
		cfgName := im.config.digest().Encoded() + ".json"
		files = append(files, entry{name: cfgName, data: im.config.data})
		e := dockerImage{Config: cfgName, RepoTags: repoTags[i]}
		for _, l := range im.layers {
			id := digest.FromBytes(append([]byte(cfgName), l.data...)).Encoded()
			files = append(files,
				entry{name: id + "/", typ: tar.TypeDir},
				entry{name: id + "/VERSION", data: []byte("1.0")},
				entry{name: id + "/json", data: []byte(`{"id":"` + id + `"}`)},
				entry{name: id + "/layer.tar", data: l.data},
			)
			e.Layers = append(e.Layers, id+"/layer.tar")
		}
		mj = append(mj, e)
	}
	m := entry{name: "manifest.json", data: jsonBytes(t, mj)}
	repos := entry{name: "repositories", data: []byte(`{}`)}
	if manifestFirst {
		es = append(es, m, repos)
		return append(es, files...)
	}
	es = append(es, files...)
	return append(es, m, repos)
}

// ggcrEntries lays out one image as go-containerregistry's tarball.Write does:
// sha256:<config hex>, <layer hex>.tar.gz, manifest.json.
func ggcrEntries(t testing.TB, im image, tags ...string) []entry {
	es := []entry{{name: "sha256:" + im.config.digest().Encoded(), data: im.config.data}}
	e := dockerImage{Config: "sha256:" + im.config.digest().Encoded(), RepoTags: tags}
	for _, l := range im.layers {
		n := l.digest().Encoded() + ".tar.gz"
		es = append(es, entry{name: n, data: l.data})
		e.Layers = append(e.Layers, n)
	}
	return append(es, entry{name: "manifest.json", data: jsonBytes(t, []dockerImage{e})})
}

// hybridEntries lays out images as Docker ≥ 25 does: an OCI layout whose
// index.json entries carry names, plus manifest.json with RepoTags.
func hybridEntries(t testing.TB, ims []image, indexDescs []ocispec.Descriptor, repoTags [][]string) []entry {
	var mj []dockerImage
	var all []blob
	for i, im := range ims {
		e := dockerImage{Config: "blobs/sha256/" + im.config.digest().Encoded(), RepoTags: repoTags[i]}
		for _, l := range im.layers {
			e.Layers = append(e.Layers, "blobs/sha256/"+l.digest().Encoded())
		}
		mj = append(mj, e)
		all = append(all, im.blobs()...)
	}
	es := ociEntries("", indexJSON(t, indexDescs...), all...)
	return append(es, entry{name: "manifest.json", data: jsonBytes(t, mj)})
}

// writeLayout writes an OCI image layout directory.
func writeLayout(t testing.TB, dir string, index []byte, blobs ...blob) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644))
	must(os.WriteFile(filepath.Join(dir, "index.json"), index, 0o644))
	for _, b := range blobs {
		must(os.WriteFile(filepath.Join(dir, "blobs", "sha256", b.digest().Encoded()), b.data, 0o644))
	}
}

// names lists the image names of a result.
func names(res *Result) []string {
	var out []string
	for _, im := range res.Images {
		out = append(out, im.Name)
	}
	return out
}

// smallLimits makes "large" blobs cheap to build in tests.
func smallLimits() limits {
	l := defaultLimits()
	l.docSize = 4 << 10
	l.metaSize = 4 << 10
	return l
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

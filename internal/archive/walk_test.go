package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// want is what a walk of a test archive should find.
type want struct {
	format  Format
	images  map[string]digest.Digest // name → target digest; "" = any (synthesised)
	docs    []digest.Digest          // must be in Docs
	blobs   []digest.Digest          // must be in Blobs (and in the store)
	notDocs []digest.Digest          // must not be in Docs
}

func checkResult(t *testing.T, res *Result, archive []byte, c Compression, st *memStore, w want) {
	t.Helper()
	if res.Format != w.format {
		t.Errorf("format = %s, want %s", res.Format, w.format)
	}
	if res.Compression != c {
		t.Errorf("compression = %s, want %s", res.Compression, c)
	}
	if archive != nil && res.BytesRead != int64(len(archive)) {
		t.Errorf("BytesRead = %d, want %d", res.BytesRead, len(archive))
	}
	got := map[string]digest.Digest{}
	for _, im := range res.Images {
		got[im.Name] = im.Target.Digest
	}
	if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(w.images))) {
		t.Errorf("names = %v, want %v", names(res), slices.Sorted(maps.Keys(w.images)))
	}
	for n, d := range w.images {
		if d != "" && got[n] != d {
			t.Errorf("%s → %s, want %s", n, got[n], d)
		}
	}
	if !slices.IsSortedFunc(res.Images, func(a, b Image) int { return strings.Compare(a.Name, b.Name) }) {
		t.Errorf("images not sorted: %v", names(res))
	}
	for _, im := range res.Images {
		_, isDoc := res.Docs[im.Target.Digest]
		_, isBlob := res.Blobs[im.Target.Digest]
		if !isDoc && !isBlob {
			t.Errorf("%s: target %s is neither in Docs nor in Blobs", im.Name, im.Target.Digest)
		}
		if im.Target.MediaType == "" || im.Target.Size <= 0 {
			t.Errorf("%s: incomplete target %+v", im.Name, im.Target)
		}
		if len(im.Target.Annotations) != 0 {
			t.Errorf("%s: target keeps annotations %v", im.Name, im.Target.Annotations)
		}
	}
	for _, d := range w.docs {
		if _, ok := res.Docs[d]; !ok {
			t.Errorf("Docs lacks %s", d)
		}
	}
	for _, d := range w.notDocs {
		if _, ok := res.Docs[d]; ok {
			t.Errorf("Docs has %s", d)
		}
	}
	for _, d := range w.blobs {
		if _, ok := res.Blobs[d]; !ok {
			t.Errorf("Blobs lacks %s", d)
		}
		if _, ok := st.blobs[d]; !ok && !st.present[d] {
			t.Errorf("store lacks %s", d)
		}
	}
	for d, b := range res.Docs {
		if digest.FromBytes(b) != d {
			t.Errorf("Docs[%s] holds bytes of %s", d, digest.FromBytes(b))
		}
		if slices.Contains(st.puts, d) {
			t.Errorf("document %s was given to Put", d)
		}
	}
	for d, size := range res.Blobs {
		if b, ok := st.blobs[d]; ok && int64(len(b)) != size {
			t.Errorf("Blobs[%s] = %d, store has %d bytes", d, size, len(b))
		}
	}
	var present int
	for d := range res.Blobs {
		if st.present[d] {
			present++
		}
	}
	if len(st.puts) != len(res.Blobs)-present {
		t.Errorf("%d Put calls for %d blobs (%d present): %v", len(st.puts), len(res.Blobs), present, st.puts)
	}
}

// synthesized returns the manifest Walk made for a docker save image.
func synthesized(t *testing.T, res *Result, name string) ocispec.Manifest {
	t.Helper()
	for _, im := range res.Images {
		if im.Name != name {
			continue
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(res.Docs[im.Target.Digest], &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	t.Fatalf("no image %s", name)
	return ocispec.Manifest{}
}

func digests(bs ...blob) []digest.Digest {
	var out []digest.Digest
	for _, b := range bs {
		out = append(out, b.digest())
	}
	return out
}

func TestWalkFormats(t *testing.T) {
	t.Parallel()
	busybox := makeImage(t, "amd64", None, "bin/busybox", "etc/passwd")
	alpine := makeImage(t, "arm64", None, "etc/alpine-release")
	gzImage := makeImage(t, "amd64", Gzip, "app/main", "app/lib")
	zstdImage := makeImage(t, "amd64", Zstd, "srv/data")
	arm := makeImage(t, "arm64", None, "bin/arm")

	// Two docker save images sharing a layer: the second's layer.tar is a symlink.
	shared := makeImage(t, "amd64", None, "shared/base")
	second := image{config: blob{ocispec.MediaTypeImageConfig, configJSON(t, "linux", "amd64", digest.Digest("sha256:"+strings.Repeat("a", 64)))}, layers: shared.layers}
	symlinked := func() []entry {
		es := dockerSaveEntries(t, false, []image{shared}, [][]string{{"base:1"}})
		id := strings.TrimSuffix(es[2].name, "/VERSION")
		es = es[:len(es)-2] // drop manifest.json, repositories
		cfg := second.config.digest().Encoded() + ".json"
		es = append(es,
			entry{name: cfg, data: second.config.data},
			entry{name: "other/", typ: tar.TypeDir},
			entry{name: "other/layer.tar", typ: tar.TypeSymlink, link: "../" + id + "/layer.tar"},
			entry{name: "hard.tar", typ: tar.TypeLink, link: id + "/layer.tar"},
			entry{name: "manifest.json", data: jsonBytes(t, []dockerImage{
				{Config: shared.config.digest().Encoded() + ".json", RepoTags: []string{"base:1"}, Layers: []string{id + "/layer.tar"}},
				{Config: cfg, RepoTags: []string{"second:1"}, Layers: []string{"other/layer.tar"}},
				{Config: cfg, RepoTags: []string{"third:1"}, Layers: []string{"./hard.tar"}},
			})},
		)
		return es
	}

	// A multi-platform index of which only amd64 is in the archive.
	multi := blob{ocispec.MediaTypeImageIndex, indexJSON(t,
		withPlatform(busybox.manifest.desc(), "amd64"),
		withPlatform(arm.manifest.desc(), "arm64"),
	)}

	// Docker ≥ 25 with the containerd image store: the index.json entry is an
	// image index; manifest.json's config is the amd64 one.
	hybridMulti := blob{ocispec.MediaTypeImageIndex, indexJSON(t,
		withPlatform(busybox.manifest.desc(), "amd64"),
		withPlatform(arm.manifest.desc(), "arm64"),
	)}

	for _, tc := range []struct {
		name    string
		entries []entry
		want    want
		check   func(t *testing.T, res *Result)
	}{
		{
			name:    "docker save, manifest.json last",
			entries: dockerSaveEntries(t, false, []image{busybox, alpine}, [][]string{{"busybox:1.36"}, {"alpine:3.20", "alpine"}}),
			want: want{
				format: FormatDockerSave,
				images: map[string]digest.Digest{"docker.io/library/busybox:1.36": "", "docker.io/library/alpine:3.20": "", "docker.io/library/alpine:latest": ""},
				docs:   digests(busybox.config, alpine.config),
				blobs:  digests(append(busybox.layers, alpine.layers...)...),
			},
			check: func(t *testing.T, res *Result) {
				m := synthesized(t, res, "docker.io/library/busybox:1.36")
				if m.MediaType != ocispec.MediaTypeImageManifest || m.SchemaVersion != 2 {
					t.Errorf("manifest %s, schema %d", m.MediaType, m.SchemaVersion)
				}
				if m.Config.Digest != busybox.config.digest() || m.Config.MediaType != ocispec.MediaTypeImageConfig || m.Config.Size != int64(len(busybox.config.data)) {
					t.Errorf("config %+v", m.Config)
				}
				if len(m.Layers) != 2 || m.Layers[0].Digest != busybox.layers[0].digest() || m.Layers[1].MediaType != ocispec.MediaTypeImageLayer {
					t.Errorf("layers %+v", m.Layers)
				}
				// Only configs and synthesised manifests: no <id>/json, no repositories.
				if len(res.Docs) != 4 {
					t.Errorf("%d docs, want 4 (2 configs, 2 manifests)", len(res.Docs))
				}
				// Only layers: no <id>/VERSION.
				if len(res.Blobs) != 3 {
					t.Errorf("%d blobs, want the 3 layers: %v", len(res.Blobs), res.Blobs)
				}
				for _, im := range res.Images {
					p := im.Target.Platform
					if p == nil || p.OS != "linux" || (p.Architecture != "amd64" && p.Architecture != "arm64") {
						t.Errorf("%s: platform %+v", im.Name, p)
					}
				}
			},
		},
		{
			name:    "docker save, manifest.json first",
			entries: dockerSaveEntries(t, true, []image{busybox}, [][]string{{"busybox:1.36"}}),
			want: want{
				format: FormatDockerSave,
				images: map[string]digest.Digest{"docker.io/library/busybox:1.36": ""},
				docs:   digests(busybox.config),
				blobs:  digests(busybox.layers...),
			},
		},
		{
			name:    "go-containerregistry tarball, gzip layers",
			entries: ggcrEntries(t, gzImage, "registry.example.com/team/app:v2"),
			want: want{
				format: FormatDockerSave,
				images: map[string]digest.Digest{"registry.example.com/team/app:v2": gzImage.manifest.digest()},
				docs:   digests(gzImage.config, gzImage.manifest),
				blobs:  digests(gzImage.layers...),
			},
		},
		{
			name:    "docker save style, zstd layer",
			entries: ggcrEntries(t, zstdImage, "app:zstd"),
			want: want{
				format: FormatDockerSave,
				images: map[string]digest.Digest{"docker.io/library/app:zstd": zstdImage.manifest.digest()},
				blobs:  digests(zstdImage.layers...),
			},
		},
		{
			name:    "docker save, symlinked and hardlinked shared layer",
			entries: symlinked(),
			want: want{
				format: FormatDockerSave,
				images: map[string]digest.Digest{"docker.io/library/base:1": "", "docker.io/library/second:1": "", "docker.io/library/third:1": ""},
				blobs:  digests(shared.layers...),
			},
			check: func(t *testing.T, res *Result) {
				a := synthesized(t, res, "docker.io/library/second:1")
				b := synthesized(t, res, "docker.io/library/third:1")
				if len(a.Layers) != 1 || a.Layers[0].Digest != shared.layers[0].digest() || b.Layers[0].Digest != shared.layers[0].digest() {
					t.Errorf("layers %+v %+v", a.Layers, b.Layers)
				}
			},
		},
		{
			name: "docker 25 hybrid",
			entries: hybridEntries(t, []image{busybox},
				[]ocispec.Descriptor{withAnnotations(busybox.manifest.desc(), annotationContainerdName, "docker.io/library/busybox:1.36", annotationRefName, "1.36")},
				[][]string{{"busybox:1.36", "busybox:stable"}}),
			want: want{
				format: FormatHybrid,
				images: map[string]digest.Digest{
					"docker.io/library/busybox:1.36":   busybox.manifest.digest(),
					"docker.io/library/busybox:stable": busybox.manifest.digest(),
				},
				docs:  digests(busybox.manifest, busybox.config),
				blobs: digests(busybox.layers...),
			},
		},
		{
			name: "docker 25 hybrid, index entry named only by RepoTags",
			entries: hybridEntries(t, []image{busybox, alpine},
				[]ocispec.Descriptor{busybox.manifest.desc(), withAnnotations(alpine.manifest.desc(), annotationRefName, "3.20")},
				[][]string{{"busybox:1.36"}, {"alpine:3.20"}}),
			want: want{
				format: FormatHybrid,
				images: map[string]digest.Digest{
					"docker.io/library/busybox:1.36": busybox.manifest.digest(),
					"docker.io/library/alpine:3.20":  alpine.manifest.digest(),
				},
			},
		},
		{
			name: "docker 25 hybrid, manifest.json entry missing from index.json",
			entries: func() []entry {
				es := hybridEntries(t, []image{busybox, alpine},
					[]ocispec.Descriptor{withAnnotations(busybox.manifest.desc(), annotationContainerdName, "docker.io/library/busybox:1.36")},
					[][]string{{"busybox:1.36"}, {"alpine:3.20"}})
				return slices.DeleteFunc(es, func(e entry) bool { return e.name == "blobs/sha256/"+alpine.manifest.digest().Encoded() })
			}(),
			want: want{
				format: FormatHybrid,
				images: map[string]digest.Digest{
					"docker.io/library/busybox:1.36": busybox.manifest.digest(),
					"docker.io/library/alpine:3.20":  alpine.manifest.digest(), // synthesised, same bytes
				},
			},
		},
		{
			name: "docker 25 hybrid, containerd store (index entry is an image index)",
			entries: func() []entry {
				es := hybridEntries(t, []image{busybox},
					[]ocispec.Descriptor{withAnnotations(hybridMulti.desc(), annotationContainerdName, "docker.io/library/busybox:1.36")},
					[][]string{{"busybox:1.36", "busybox:latest"}})
				return append(es[:3], append([]entry{{name: "blobs/sha256/" + hybridMulti.digest().Encoded(), data: hybridMulti.data}}, es[3:]...)...)
			}(),
			want: want{
				format: FormatHybrid,
				images: map[string]digest.Digest{
					"docker.io/library/busybox:1.36":   hybridMulti.digest(),
					"docker.io/library/busybox:latest": hybridMulti.digest(),
				},
			},
		},
		{
			name: "oci, containerd export with ./ prefixes",
			entries: ociEntries("./", indexJSON(t,
				withAnnotations(busybox.manifest.desc(), annotationContainerdName, "docker.io/library/busybox:1.36", annotationRefName, "1.36"),
				withAnnotations(busybox.manifest.desc(), annotationContainerdName, "docker.io/library/busybox:latest", annotationRefName, "latest"),
			), busybox.blobs()...),
			want: want{
				format: FormatOCI,
				images: map[string]digest.Digest{
					"docker.io/library/busybox:1.36":   busybox.manifest.digest(),
					"docker.io/library/busybox:latest": busybox.manifest.digest(),
				},
				docs:  digests(busybox.manifest, busybox.config),
				blobs: digests(busybox.layers...),
			},
			check: func(t *testing.T, res *Result) {
				if mt := res.Images[0].Target.MediaType; mt != ocispec.MediaTypeImageManifest {
					t.Errorf("target media type %s", mt)
				}
			},
		},
		{
			name: "oci, partial multi-platform index",
			entries: ociEntries("", indexJSON(t,
				withAnnotations(multi.desc(), annotationContainerdName, "docker.io/library/busybox:1.36"),
			), append([]blob{multi}, busybox.blobs()...)...),
			want: want{
				format:  FormatOCI,
				images:  map[string]digest.Digest{"docker.io/library/busybox:1.36": multi.digest()},
				docs:    digests(multi, busybox.manifest, busybox.config),
				blobs:   digests(busybox.layers...),
				notDocs: digests(arm.manifest, arm.config),
			},
		},
		{
			name: "oci, full reference in ref.name, descriptor without media type",
			entries: func() []entry {
				d := busybox.manifest.desc()
				d.MediaType = ""
				return ociEntries("", indexJSON(t, withAnnotations(d, annotationRefName, "registry.example.com/team/busybox:1.36")), busybox.blobs()...)
			}(),
			want: want{
				format: FormatOCI,
				images: map[string]digest.Digest{"registry.example.com/team/busybox:1.36": busybox.manifest.digest()},
			},
			check: func(t *testing.T, res *Result) {
				if mt := res.Images[0].Target.MediaType; mt != ocispec.MediaTypeImageManifest {
					t.Errorf("target media type %q, want it from the manifest", mt)
				}
			},
		},
	} {
		for _, c := range allCompressions {
			for _, mode := range walkModes {
				if c != None && mode != "stream" {
					continue // a compressed archive is a stream either way
				}
				t.Run(tc.name+"/"+string(c)+"/"+mode, func(t *testing.T) {
					t.Parallel()
					archive := compress(t, c, tarBytes(t, tc.entries))
					if mode == "seekable" {
						res, st := walkConcurrently(t, archive)
						checkResult(t, res, archive, c, st, tc.want)
						if tc.check != nil {
							tc.check(t, res)
						}
						return
					}
					st := newMemStore()
					res, err := walkAs(t.Context(), mode, archive, st)
					if err != nil {
						t.Fatal(err)
					}
					checkResult(t, res, archive, c, st, tc.want)
					if tc.check != nil {
						tc.check(t, res)
					}
				})
			}
		}
	}
}

// walkModes are the ways tests give an archive to Walk; see walkAs.
var walkModes = []string{"seekable", "seekable-seq", "stream"}

// walkAs walks an archive given as mode: "seekable" is a bytes.Reader (an
// io.ReaderAt and io.Seeker, as an *os.File is), whose blobs are written 4 at
// a time; "seekable-seq" the same, written one by one as the pass meets them;
// "stream" a plain io.Reader (as a pipe is).
func walkAs(ctx context.Context, mode string, b []byte, st Store) (*Result, error) {
	switch mode {
	case "seekable":
		return WalkWith(ctx, bytes.NewReader(b), st, WalkOptions{Concurrency: 4})
	case "seekable-seq":
		return WalkWith(ctx, bytes.NewReader(b), st, WalkOptions{Concurrency: 1})
	}
	return Walk(ctx, struct{ io.Reader }{bytes.NewReader(b)}, st)
}

// walkConcurrently walks a plain archive one blob at a time, then with 4
// writers into a store that waits for two Put calls to overlap. The results
// must be the same, and the writes must overlap when there are several.
func walkConcurrently(t *testing.T, archive []byte) (*Result, *memStore) {
	t.Helper()
	seqStore := newMemStore()
	seq, err := walkAs(t.Context(), "seekable-seq", archive, seqStore)
	if err != nil {
		t.Fatal(err)
	}
	several := len(seqStore.puts) >= 2
	var wait time.Duration
	if several {
		wait = 10 * time.Second
	}
	st := newOverlapStore(wait)
	res, err := walkAs(t.Context(), "seekable", archive, st)
	if err != nil {
		t.Fatal(err)
	}
	sameResult(t, seq, res)
	if several && !st.overlapped() {
		t.Errorf("no two of %d Put calls ran at once", len(st.puts))
	}
	if !slices.Equal(slices.Sorted(slices.Values(seqStore.puts)), slices.Sorted(slices.Values(st.puts))) {
		t.Errorf("Put calls %v, one by one %v", st.puts, seqStore.puts)
	}
	return res, st.memStore
}

// sameResult fails unless two walks found the same.
func sameResult(t *testing.T, want, got *Result) {
	t.Helper()
	j1, _ := json.Marshal(want.Images)
	j2, _ := json.Marshal(got.Images)
	if !bytes.Equal(j1, j2) {
		t.Errorf("images differ:\n%s\n%s", j1, j2)
	}
	if want.Format != got.Format || want.Compression != got.Compression || want.BytesRead != got.BytesRead {
		t.Errorf("format, compression, bytes read: %s %s %d, want %s %s %d", got.Format, got.Compression, got.BytesRead, want.Format, want.Compression, want.BytesRead)
	}
	if !maps.EqualFunc(want.Docs, got.Docs, bytes.Equal) {
		t.Errorf("docs differ: %v, want %v", slices.Sorted(maps.Keys(got.Docs)), slices.Sorted(maps.Keys(want.Docs)))
	}
	if !maps.Equal(want.Blobs, got.Blobs) {
		t.Errorf("blobs differ: %v, want %v", got.Blobs, want.Blobs)
	}
}

// readCounter counts the bytes read through a seekable reader, with Read or
// (concurrently) ReadAt.
type readCounter struct {
	*bytes.Reader
	n atomic.Int64
}

func (r *readCounter) Read(p []byte) (int, error) {
	n, err := r.Reader.Read(p)
	r.n.Add(int64(n))
	return n, err
}

func (r *readCounter) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.Reader.ReadAt(p, off)
	r.n.Add(int64(n))
	return n, err
}

// TestWalkSkipsPresentBlob: a large blob the store has is skipped via Has, and
// its bytes never reach Put; a large blob it lacks is written with its digest.
// From a seekable archive, the skipped bytes are not even read.
func TestWalkSkipsPresentBlob(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 7))
	big := func(n int) blob {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return blob{ocispec.MediaTypeImageLayerGzip, compress(t, Gzip, b)}
	}
	present, absent := big(9<<20), big(9<<20) // over the 8 MiB document threshold
	small := makeImage(t, "amd64", Gzip, "etc/small").layers[0]
	cfg := blob{ocispec.MediaTypeImageConfig, configJSON(t, "linux", "amd64")}
	mf := blob{ocispec.MediaTypeImageManifest, manifestJSON(t, cfg, []blob{present, absent, small})}
	archive := tarBytes(t, ociEntries("", indexJSON(t, withAnnotations(mf.desc(), annotationContainerdName, "example.com/big:1")), mf, cfg, present, absent, small))

	for _, mode := range walkModes {
		st := newMemStore()
		st.present[present.digest()] = true
		rc := &readCounter{Reader: bytes.NewReader(archive)}
		var in io.Reader = rc
		if mode == "stream" {
			in = struct{ io.Reader }{rc}
		}
		opts := WalkOptions{Concurrency: 4}
		if mode == "seekable-seq" {
			opts.Concurrency = 1
		}
		res, err := WalkWith(t.Context(), in, st, opts)
		if err != nil {
			t.Fatal(err)
		}
		checkResult(t, res, archive, None, st, want{
			format: FormatOCI,
			images: map[string]digest.Digest{"example.com/big:1": mf.digest()},
			docs:   digests(mf, cfg),
			blobs:  digests(present, absent, small),
		})
		if slices.Contains(st.puts, present.digest()) || len(st.putPresent) != 0 {
			t.Errorf("%s: present blob was given to Put", mode)
		}
		puts := st.puts
		if mode == "seekable" {
			// Concurrent writes, the largest first: any order.
			puts = slices.Sorted(slices.Values(puts))
		}
		if wantPuts := digests(absent, small); !slices.Equal(puts, wantPuts) && !slices.Equal(puts, slices.Sorted(slices.Values(wantPuts))) {
			t.Errorf("%s: Put calls %v, want %v", mode, st.puts, wantPuts)
		}
		if st.hasN != 2 {
			t.Errorf("%s: %d Has calls, want 2 (one per large blob)", mode, st.hasN)
		}
		if res.Blobs[present.digest()] != int64(len(present.data)) {
			t.Errorf("%s: Blobs[present] = %d", mode, res.Blobs[present.digest()])
		}
		skipped := int64(len(archive) - len(present.data))
		// What is read: the peek at the start, then all but the present blob,
		// of which only the first bytes (to tell its compression) and the last.
		// Concurrent writers read again the last byte of each blob they
		// write, which the tar reader read to check the archive goes on.
		allow := skipped + peekSize + sniffHead + 1
		if mode == "seekable" {
			allow += 2
		}
		if n := rc.n.Load(); mode != "stream" && n > allow {
			t.Errorf("%s: read %d bytes of %d; the present blob's %d should be seeked over", mode, n, len(archive), len(present.data))
		}
		if n := rc.n.Load(); mode == "stream" && n != int64(len(archive)) {
			t.Errorf("stream: read %d bytes of %d", n, len(archive))
		}
	}

	// Docker save: a large layer is hashed by the store, a small one too.
	t.Run("docker save", func(t *testing.T) {
		im := image{config: cfg, layers: []blob{absent, small}}
		archive := tarBytes(t, ggcrEntries(t, im, "big:1"))
		st := newMemStore()
		res, err := Walk(t.Context(), bytes.NewReader(archive), st)
		if err != nil {
			t.Fatal(err)
		}
		checkResult(t, res, archive, None, st, want{
			format: FormatDockerSave,
			images: map[string]digest.Digest{"docker.io/library/big:1": ""},
			blobs:  digests(absent, small),
		})
		if st.hasN != 0 {
			t.Errorf("%d Has calls for blobs of unknown digest", st.hasN)
		}
	})
}

// TestWalkDockerSaveDeterministic: the synthesised manifest has the same bytes
// whatever the order of entries, so a re-import gives the same target.
func TestWalkDockerSaveDeterministic(t *testing.T) {
	t.Parallel()
	im := makeImage(t, "amd64", None, "a", "b", "c")
	var targets []digest.Digest
	for _, first := range []bool{true, false} {
		res, err := Walk(t.Context(), bytes.NewReader(tarBytes(t, dockerSaveEntries(t, first, []image{im}, [][]string{{"x:1"}}))), newMemStore())
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, res.Images[0].Target.Digest)
	}
	if targets[0] != targets[1] {
		t.Errorf("targets differ: %v", targets)
	}
	// The synthesised manifest is what makeImage writes for the same blobs.
	if targets[0] != im.manifest.digest() {
		t.Errorf("target %s, want %s", targets[0], im.manifest.digest())
	}
}

func TestWalkNaming(t *testing.T) {
	t.Parallel()
	im := makeImage(t, "amd64", None, "x")
	dgst := "sha256:" + strings.Repeat("b", 64)
	oci := func(kv ...string) []entry {
		return ociEntries("", indexJSON(t, withAnnotations(im.manifest.desc(), kv...)), im.blobs()...)
	}
	save := func(tags ...string) []entry {
		return dockerSaveEntries(t, false, []image{im}, [][]string{tags})
	}
	for _, tc := range []struct {
		name    string
		entries []entry
		want    []string
		err     string
	}{
		{"containerd name", oci(annotationContainerdName, "docker.io/library/busybox:1.36"), []string{"docker.io/library/busybox:1.36"}, ""},
		{"containerd name without tag", oci(annotationContainerdName, "busybox"), []string{"docker.io/library/busybox:latest"}, ""},
		{"containerd name wins over ref.name", oci(annotationContainerdName, "ghcr.io/o/a:1", annotationRefName, "example.com/b:2"), []string{"ghcr.io/o/a:1"}, ""},
		{"containerd name with digest", oci(annotationContainerdName, "ghcr.io/o/a@"+dgst), []string{"ghcr.io/o/a@" + dgst}, ""},
		{"full ref.name", oci(annotationRefName, "registry.example.com/app:1.0"), []string{"registry.example.com/app:1.0"}, ""},
		{"ref.name with port, no tag", oci(annotationRefName, "localhost:5000/app"), []string{"localhost:5000/app:latest"}, ""},
		{"short ref.name with tag", oci(annotationRefName, "busybox:1.36"), []string{"docker.io/library/busybox:1.36"}, ""},
		{"bare tag latest", oci(annotationRefName, "latest"), nil,
			`index.json entry ` + string(im.manifest.digest()) + ` has only the bare tag "latest" in org.opencontainers.image.ref.name; a full reference is needed`},
		{"bare tag 1.36", oci(annotationRefName, "1.36"), nil, `has only the bare tag "1.36"`},
		{"no annotations", oci(), nil, "index.json entry " + string(im.manifest.digest()) + " has no name"},
		{"invalid containerd name", oci(annotationContainerdName, "Not A Name"), nil, `io.containerd.image.name "Not A Name"`},
		{"invalid full ref.name", oci(annotationRefName, "UPPER/Case:1"), nil, `org.opencontainers.image.ref.name "UPPER/Case:1" is not a full reference`},
		{"RepoTags", save("busybox:1.36"), []string{"docker.io/library/busybox:1.36"}, ""},
		{"RepoTags without tag", save("busybox"), []string{"docker.io/library/busybox:latest"}, ""},
		{"RepoTags full", save("ghcr.io/org/app:v1", "quay.io/org/app:v1"), []string{"ghcr.io/org/app:v1", "quay.io/org/app:v1"}, ""},
		{"RepoTags duplicate after normalisation", save("busybox:1.36", "docker.io/library/busybox:1.36"), []string{"docker.io/library/busybox:1.36"}, ""},
		{"untagged docker save", save(), nil, "image " + string(im.config.digest()) + " has no name (untagged docker save)"},
		{"invalid RepoTag", save("bad tag"), nil, `manifest.json: RepoTag "bad tag"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := Walk(t.Context(), bytes.NewReader(tarBytes(t, tc.entries)), newMemStore())
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(names(res), tc.want) {
				t.Errorf("names %v, want %v", names(res), tc.want)
			}
		})
	}
}

func TestWalkErrors(t *testing.T) {
	t.Parallel()
	im := makeImage(t, "amd64", None, "x")
	other := makeImage(t, "amd64", None, "y")
	named := func(d ocispec.Descriptor, n string) ocispec.Descriptor {
		return withAnnotations(d, annotationContainerdName, n)
	}
	noArch := blob{ocispec.MediaTypeImageConfig, []byte(`{"os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`)}
	noArchManifest := blob{ocispec.MediaTypeImageManifest, manifestJSON(t, noArch, im.layers)}
	plain := tarBytes(t, ociEntries("", indexJSON(t, named(im.manifest.desc(), "a:1")), im.blobs()...))
	bz2Layer := blob{"", compress(t, Bzip2, layerTar(t, "z"))}
	schema1 := blob{"", []byte(`{"schemaVersion":1,"name":"x","tag":"1","fsLayers":[]}`)}
	random := make([]byte, 4096)
	for i := range random {
		random[i] = byte(i*7 + i/13)
	}
	dockerSave := dockerSaveEntries(t, false, []image{im}, [][]string{{"a:1"}})
	without := func(es []entry, suffix string) []entry {
		return slices.DeleteFunc(slices.Clone(es), func(e entry) bool { return strings.HasSuffix(e.name, suffix) })
	}
	gzCorrupt := compress(t, Gzip, plain)
	gzCorrupt[len(gzCorrupt)-6] ^= 0xff // CRC32 in the trailer
	zstdArchive := compress(t, Zstd, plain)

	for _, tc := range []struct {
		name string
		in   []byte
		err  string
		is   error
	}{
		{"empty", nil, "not a tar archive: empty stream", ErrNotTar},
		{"not a tar", random, "not a tar archive", ErrNotTar},
		{"gzip, not a tar", compress(t, Gzip, bytes.Repeat([]byte("log line\n"), 100)), "not a tar archive (gzip-compressed)", ErrNotTar},
		{"tar of other files", tarBytes(t, []entry{{name: "README", data: []byte("hi")}, {name: "a/b.bin", data: random}}), "not an image archive: no manifest.json or index.json", ErrNotImage},
		{"empty tar", make([]byte, 1024), "not an image archive", ErrNotImage},
		{"docker save v1.0", tarBytes(t, []entry{{name: "repositories", data: []byte(`{"busybox":{"latest":"abc"}}`)}, {name: "abc/layer.tar", data: layerTar(t, "q")}}), "docker save v1.0", nil},
		{"missing layer", tarBytes(t, without(dockerSave, "/layer.tar")), `manifest.json: layer "`, nil},
		{"missing config", tarBytes(t, without(dockerSave, im.config.digest().Encoded()+".json")), `manifest.json: config "` + im.config.digest().Encoded() + `.json" is not in the archive`, nil},
		{"docker save config without os/arch", tarBytes(t, dockerSaveEntries(t, false, []image{{config: noArch, layers: im.layers}}, [][]string{{"a:1"}})), "no os/architecture", nil},
		{"oci config without os/arch", tarBytes(t, ociEntries("", indexJSON(t, named(noArchManifest.desc(), "a:1")), noArchManifest, noArch, im.layers[0])), "config " + string(noArch.digest()) + ": no os/architecture", nil},
		{"same name, two targets (oci)", tarBytes(t, ociEntries("", indexJSON(t, named(im.manifest.desc(), "a:1"), named(other.manifest.desc(), "docker.io/library/a:1")), append(im.blobs(), other.blobs()...)...)), "name docker.io/library/a:1 is given to two images", nil},
		{"same name, two targets (docker save)", tarBytes(t, dockerSaveEntries(t, false, []image{im, other}, [][]string{{"a:1"}, {"a:1"}})), "is given to two images", nil},
		{"index entry not in the archive", tarBytes(t, ociEntries("", indexJSON(t, named(other.manifest.desc(), "a:1")), im.blobs()...)), "index.json entry " + string(other.manifest.digest()) + " is not in the archive", nil},
		{"index lists nothing", tarBytes(t, ociEntries("", indexJSON(t), im.blobs()...)), "index.json lists no images", nil},
		{"index.json not JSON", tarBytes(t, []entry{{name: "index.json", data: []byte("nope")}}), "index.json: ", nil},
		{"manifest.json not JSON", tarBytes(t, []entry{{name: "manifest.json", data: []byte("{")}}), "manifest.json: ", nil},
		{"bzip2 layer", tarBytes(t, dockerSaveEntries(t, false, []image{{config: im.config, layers: []blob{bz2Layer}}}, [][]string{{"a:1"}})), "is bzip2-compressed; containerd cannot unpack such layers", nil},
		{"digest mismatch", tarBytes(t, []entry{{name: "blobs/sha256/" + other.config.digest().Encoded(), data: im.config.data}}), "blobs/sha256/" + other.config.digest().Encoded() + ": content has digest " + string(im.config.digest()), nil},
		{"size mismatch", tarBytes(t, ociEntries("", indexJSON(t, named(func() ocispec.Descriptor { d := im.manifest.desc(); d.Size++; return d }(), "a:1")), im.blobs()...)), "bytes, its descriptor says", nil},
		{"docker schema 1", tarBytes(t, ociEntries("", indexJSON(t, named(schema1.desc(), "a:1")), schema1)), "docker schema 1 manifests are not supported", nil},
		{"truncated inside an entry", plain[:len(plain)/2+100], "unexpected EOF", nil},
		{"truncated zstd", zstdArchive[:len(zstdArchive)/2], "zstd: unexpected EOF", io.ErrUnexpectedEOF},
		{"gzip checksum", gzCorrupt, "gzip: invalid checksum", nil},
		{"negative size in index", tarBytes(t, ociEntries("", []byte(`{"schemaVersion":2,"manifests":[{"digest":"sha256:`+strings.Repeat("0", 64)+`","size":-1}]}`))), "is not in the archive", nil},
		{"invalid digest in index", tarBytes(t, ociEntries("", []byte(`{"schemaVersion":2,"manifests":[{"digest":"sha256:xyz","size":1}]}`))), `index.json entry 0: digest "sha256:xyz"`, nil},
	} {
		for _, mode := range walkModes {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				_, err := walkAs(t.Context(), mode, tc.in, newMemStore())
				if err == nil {
					t.Fatal("no error")
				}
				if !strings.Contains(err.Error(), tc.err) {
					t.Errorf("error %q, want one containing %q", err, tc.err)
				}
				if tc.is != nil && !errors.Is(err, tc.is) {
					t.Errorf("error %q is not %v", err, tc.is)
				}
				if msg := err.Error(); strings.Contains(msg, "failed to") || msg[:1] != strings.ToLower(msg[:1]) {
					t.Errorf("error %q: lowercase, no \"failed to\"", msg)
				}
			})
		}
	}
}

// TestWalkTruncatedAtEntryBoundary cuts a plain tar right after each entry: the
// tar reader sees a clean end, the walker must not.
func TestWalkTruncatedAtEntryBoundary(t *testing.T) {
	t.Parallel()
	im := makeImage(t, "amd64", None, "x")
	es := ociEntries("", indexJSON(t, withAnnotations(im.manifest.desc(), annotationContainerdName, "a:1")), im.blobs()...)
	full := tarBytes(t, es)
	for i := 1; i < len(es); i++ {
		for _, mode := range walkModes {
			cut := len(tarBytes(t, es[:i])) - 1024 // without the end-of-archive blocks
			_, err := walkAs(t.Context(), mode, full[:cut], newMemStore())
			if err == nil || !strings.Contains(err.Error(), "without an end-of-archive marker") {
				t.Errorf("%s: cut after entry %d (%s): %v", mode, i, es[i-1].name, err)
			}
			// Cut inside the entry's data or padding.
			_, err = walkAs(t.Context(), mode, full[:cut-1], newMemStore())
			if err == nil || !strings.Contains(err.Error(), "unexpected EOF") && !strings.Contains(err.Error(), "without an end-of-archive marker") {
				t.Errorf("%s: cut inside entry %d (%s): %v", mode, i, es[i-1].name, err)
			}
		}
	}
	if _, err := Walk(t.Context(), bytes.NewReader(full), newMemStore()); err != nil {
		t.Errorf("full archive: %v", err)
	}
}

// sparseTar is a tar whose one entry, blobs/sha256/<hex>, is an old-GNU
// sparse file of 8 GiB of holes.
func sparseTar(t *testing.T) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	name := "blobs/sha256/" + strings.Repeat("c", 64)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, ModTime: epoch, Format: tar.FormatGNU}); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	b[156] = tar.TypeGNUSparse
	copy(b[483:495], "77777777777\x00") // real size
	copy(b[148:156], "        ")
	var sum int64
	for _, c := range b[:512] {
		sum += int64(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

func TestWalkSparseEntry(t *testing.T) {
	t.Parallel()
	tr := tar.NewReader(bytes.NewReader(sparseTar(t)))
	hdr, err := tr.Next()
	if err != nil || hdr.Size != 0o77777777777 {
		t.Fatalf("test archive: %v, %+v", err, hdr)
	}
	_, err = Walk(t.Context(), bytes.NewReader(sparseTar(t)), newMemStore())
	if err == nil || !strings.Contains(err.Error(), "sparse tar entries are not supported") {
		t.Fatalf("error %v", err)
	}
}

func TestWalkContextCancelled(t *testing.T) {
	t.Parallel()
	im := makeImage(t, "amd64", None, "x")
	archive := tarBytes(t, ociEntries("", indexJSON(t, withAnnotations(im.manifest.desc(), annotationContainerdName, "a:1")), im.blobs()...))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Walk(ctx, bytes.NewReader(archive), newMemStore()); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	// Cancelled by the store in the middle of the stream.
	ctx, cancel = context.WithCancel(t.Context())
	st := &cancelStore{memStore: newMemStore(), cancel: cancel}
	if _, err := walk(ctx, bytes.NewReader(archive), st, WalkOptions{}, smallLimits()); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}

type cancelStore struct {
	*memStore
	cancel func()
}

func (s *cancelStore) Put(ctx context.Context, d digest.Digest, size int64, r io.Reader) (digest.Digest, error) {
	s.cancel()
	return s.memStore.Put(ctx, d, size, r)
}

type failStore struct{ *memStore }

func (failStore) Put(context.Context, digest.Digest, int64, io.Reader) (digest.Digest, error) {
	return "", errors.New("disk full")
}

func TestWalkStoreError(t *testing.T) {
	t.Parallel()
	im := makeImage(t, "amd64", None, "x")
	archive := tarBytes(t, ociEntries("", indexJSON(t, withAnnotations(im.manifest.desc(), annotationContainerdName, "a:1")), im.blobs()...))
	_, err := Walk(t.Context(), bytes.NewReader(archive), failStore{newMemStore()})
	want := "writing blobs/sha256/" + im.layers[0].digest().Encoded() + ": disk full"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %s", err, want)
	}
}

// TestWalkLimits: hostile sizes stay bounded.
func TestWalkLimits(t *testing.T) {
	t.Parallel()
	lim := smallLimits()
	lim.docBytes = 16 << 10
	lim.entries = 50
	var many []entry
	for i := range 60 {
		many = append(many, entry{name: fmt.Sprintf("f%d", i), data: []byte("x")})
	}
	var docs []entry
	for i := range 10 {
		b := []byte(fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i, strings.Repeat("p", 3000)))
		docs = append(docs, entry{name: "blobs/sha256/" + digest.FromBytes(b).Encoded(), data: b})
	}
	for _, tc := range []struct {
		name string
		es   []entry
		err  string
	}{
		{"too many entries", many, "more than 50 entries"},
		{"too many documents", docs, "exceed 16384 bytes"},
		{"huge index.json", []entry{{name: "index.json", data: bytes.Repeat([]byte(" "), 5<<10)}}, "index.json: 5120 bytes is too large"},
		{"long name", []entry{{name: strings.Repeat("n/", 3000) + "f", data: []byte("x")}}, "is longer than 4096 bytes"},
	} {
		_, err := walk(t.Context(), bytes.NewReader(tarBytes(t, tc.es)), newMemStore(), WalkOptions{}, lim)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		}
	}
}

func TestWalkDir(t *testing.T) {
	t.Parallel()
	amd := imageWith(t, "amd64", randomLayer(64<<10, 1)) // larger than smallLimits' documents
	arm := imageWith(t, "arm64", randomLayer(64<<10, 2))
	idx := blob{ocispec.MediaTypeImageIndex, indexJSON(t, withPlatform(amd.manifest.desc(), "amd64"), withPlatform(arm.manifest.desc(), "arm64"))}
	top := indexJSON(t, withAnnotations(idx.desc(), annotationContainerdName, "example.com/multi:1"))

	dir := t.TempDir()
	// Partial: arm64's manifest is there, its config and layer are not; an
	// unreferenced blob is never read.
	stray := blob{"", []byte("stray blob nobody refers to")}
	writeLayout(t, dir, top, append([]blob{idx, arm.manifest, stray}, amd.blobs()...)...)
	st := newMemStore()
	st.present[amd.layers[0].digest()] = true
	res, err := walkDir(t.Context(), dir, st, WalkOptions{}, smallLimits())
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, res, nil, None, st, want{
		format:  FormatOCI,
		images:  map[string]digest.Digest{"example.com/multi:1": idx.digest()},
		docs:    digests(idx, amd.manifest, amd.config, arm.manifest),
		blobs:   digests(amd.layers...),
		notDocs: digests(arm.config),
	})
	if len(st.puts) != 0 || len(st.putPresent) != 0 || st.hasN != 1 {
		t.Errorf("Put calls %v, %d Has calls: the only layer was present", append(st.puts, st.putPresent...), st.hasN)
	}
	if _, ok := res.Blobs[stray.digest()]; ok {
		t.Errorf("unreferenced blob read")
	}
	var wantRead int64
	for _, b := range []blob{idx, amd.manifest, amd.config, arm.manifest} {
		wantRead += int64(len(b.data))
	}
	wantRead += int64(len(top)) + int64(len(`{"imageLayoutVersion":"1.0.0"}`))
	wantRead += sniffHead // of the present layer, to tell its compression
	if res.BytesRead != wantRead {
		t.Errorf("BytesRead %d, want %d", res.BytesRead, wantRead)
	}

	t.Run("not a layout", func(t *testing.T) {
		_, err := WalkDir(t.Context(), t.TempDir(), newMemStore())
		if !errors.Is(err, ErrNotImage) || !strings.Contains(err.Error(), "no oci-layout") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("index entry missing", func(t *testing.T) {
		dir := t.TempDir()
		writeLayout(t, dir, top, amd.blobs()...)
		_, err := WalkDir(t.Context(), dir, newMemStore())
		if err == nil || !strings.Contains(err.Error(), "index.json entry "+string(idx.digest())+" is not in the archive") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("a blob that is a named pipe", func(t *testing.T) {
		// Opening a FIFO for reading blocks until a writer comes: the walk
		// must refuse it instead of hanging.
		dir := t.TempDir()
		writeLayout(t, dir, top, append([]blob{idx, arm.manifest}, amd.blobs()...)...)
		layer := filepath.Join(dir, "blobs", "sha256", amd.layers[0].digest().Encoded())
		if err := os.Remove(layer); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(layer, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := WalkDir(t.Context(), dir, newMemStore())
		if !errors.Is(err, ErrNotRegular) {
			t.Errorf("error %v, want one saying the blob is not a regular file", err)
		}
	})
	t.Run("hybrid", func(t *testing.T) {
		dir := t.TempDir()
		writeLayout(t, dir, indexJSON(t, amd.manifest.desc()), amd.blobs()...)
		mj := jsonBytes(t, []dockerImage{{Config: "blobs/sha256/" + amd.config.digest().Encoded(), RepoTags: []string{"amd:1"}, Layers: []string{"blobs/sha256/" + amd.layers[0].digest().Encoded()}}})
		if err := os.WriteFile(filepath.Join(dir, "manifest.json"), mj, 0o644); err != nil {
			t.Fatal(err)
		}
		st := newMemStore()
		res, err := WalkDir(t.Context(), dir, st)
		if err != nil {
			t.Fatal(err)
		}
		checkResult(t, res, nil, None, st, want{
			format: FormatHybrid,
			images: map[string]digest.Digest{"docker.io/library/amd:1": amd.manifest.digest()},
			blobs:  digests(amd.layers...),
		})
	})
}

// TestWalkDirMatchesWalk: the same layout as a directory and as a tar gives
// the same images, docs and blobs.
func TestWalkDirMatchesWalk(t *testing.T) {
	t.Parallel()
	im := makeImage(t, "amd64", Gzip, "a", "b")
	index := indexJSON(t, withAnnotations(im.manifest.desc(), annotationContainerdName, "example.com/x:1"))
	dir := t.TempDir()
	writeLayout(t, dir, index, im.blobs()...)
	fromDir, err := WalkDir(t.Context(), dir, newMemStore())
	if err != nil {
		t.Fatal(err)
	}
	fromTar, err := Walk(t.Context(), bytes.NewReader(tarBytes(t, ociEntries("", index, im.blobs()...))), newMemStore())
	if err != nil {
		t.Fatal(err)
	}
	j1, _ := json.Marshal(fromDir.Images)
	j2, _ := json.Marshal(fromTar.Images)
	if !bytes.Equal(j1, j2) || !maps.EqualFunc(fromDir.Docs, fromTar.Docs, bytes.Equal) || !maps.Equal(fromDir.Blobs, fromTar.Blobs) {
		t.Errorf("dir and tar differ:\n%+v\n%+v", fromDir, fromTar)
	}
}

// TestWalkOCILayoutHeader: a broken oci-layout file is an error.
func TestWalkOCILayoutHeader(t *testing.T) {
	t.Parallel()
	im := makeImage(t, "amd64", None, "x")
	es := ociEntries("", indexJSON(t, withAnnotations(im.manifest.desc(), annotationContainerdName, "a:1")), im.blobs()...)
	es[0].data = []byte("garbage")
	_, err := Walk(t.Context(), bytes.NewReader(tarBytes(t, es)), newMemStore())
	if err == nil || !strings.HasPrefix(err.Error(), "oci-layout: ") {
		t.Fatalf("error %v", err)
	}
}

// benchArchive is an OCI tar of n random (incompressible) layers of size bytes.
func benchArchive(b *testing.B, n, size int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	var layers []blob
	for range n {
		d := make([]byte, size)
		for i := range d {
			d[i] = byte(r.Uint32())
		}
		layers = append(layers, blob{ocispec.MediaTypeImageLayer, d})
	}
	cfg := blob{ocispec.MediaTypeImageConfig, configJSON(b, "linux", "amd64")}
	mf := blob{ocispec.MediaTypeImageManifest, manifestJSON(b, cfg, layers)}
	return tarBytes(b, ociEntries("", indexJSON(b, withAnnotations(mf.desc(), annotationContainerdName, "bench:1")), append([]blob{mf, cfg}, layers...)...))
}

func BenchmarkWalk(b *testing.B) {
	archive := benchArchive(b, 4, 1<<20) // 4 MiB, layers below the document threshold
	big := benchArchive(b, 1, 12<<20)    // one layer streamed to the store
	for _, bc := range []struct {
		name string
		data []byte
	}{{"small-layers", archive}, {"large-layer", big}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Walk(b.Context(), bytes.NewReader(bc.data), discardStore{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

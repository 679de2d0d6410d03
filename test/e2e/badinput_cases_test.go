package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/archive/zstdframe"
	"github.com/holdfast-project/holdfast/internal/fixture"
)

// A bad input is one file holdfast must refuse (or skip): how it is made,
// and what holdfast must say of it. The malformed kinds are built in memory
// from a small image the test lays out itself, entry by entry, so that every
// structural boundary is known; the broken archives are real images as
// tools write them, broken one way; the hostile ones are written as they
// are read, being too large to hold.
type badInput struct {
	name string // the subtest
	file string // its name in the images dir
	data []byte // its bytes; or, when write is set, what write writes
	// write writes the file when it is too large to hold in memory.
	write func(w io.Writer)
	skip  bool   // not an archive at all: skipped, no error
	cause string // what the error must contain besides the file's name
	// directCause replaces cause on --write-path=direct, where holdfast
	// checks a blob's bytes itself before containerd sees them.
	directCause string
	images      []string // the names the file gives its images: never recorded
	extra       []string // flags for the sync
}

// causeOn is the cause on write path wp.
func (b badInput) causeOn(wp string) string {
	if wp == "direct" && b.directCause != "" {
		return b.directCause
	}
	return b.cause
}

// put writes the input into dir under its file name, and returns the path.
func (b badInput) put(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, b.file)
	b.writeTo(t, path)
	return path
}

// writeTo writes the input at path.
func (b badInput) writeTo(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if b.write == nil {
		if err := os.WriteFile(path, b.data, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	b.write(f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// badArchives are archives of real images, each broken one way, as a tool
// or a failing disk leaves them.
func badArchives(t *testing.T) []badInput {
	t.Helper()
	ctx := context.Background()
	none := fixture.CompressOptions{}
	var bads []badInput
	// archive is what write writes, compressed with c.
	archive := func(c fixture.Compression, write func(ctx context.Context, w io.Writer) error) []byte {
		var buf bytes.Buffer
		cw, err := fixture.Compress(&buf, c, none)
		if err != nil {
			t.Fatal(err)
		}
		if err := write(ctx, cw); err != nil {
			t.Fatal(err)
		}
		if err := cw.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}

	// Truncated: a gzip archive cut in the middle.
	trunc := build(t, fixture.ImageSpec{Names: []string{"e2e.local/bad/truncated:1"}, Layers: fixture.UniformLayers(2, 256<<10, false, 7)})
	truncated := archive(fixture.None, func(ctx context.Context, w io.Writer) error {
		return fixture.Truncate(w, 0.6, func(w io.Writer) error {
			cw, err := fixture.Compress(w, fixture.Gzip, none)
			if err != nil {
				return err
			}
			if err := fixture.WriteOCI(ctx, cw, fixture.OCIOptions{Names: fixture.NameContainerd}, trunc); err != nil {
				return err
			}
			return cw.Close()
		})
	})
	bads = append(bads, badInput{name: "truncated", file: "truncated.tar.gz", data: truncated, cause: "unexpected EOF", images: trunc.Names})

	// A bad compression frame: a valid zstd archive with bytes flipped in the middle.
	frame := build(t, fixture.ImageSpec{Names: []string{"e2e.local/bad/frame:1"}, Layers: fixture.UniformLayers(1, 256<<10, true, 8)})
	zb := archive(fixture.Zstd, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerd}, frame)
	})
	bads = append(bads, badInput{name: "badframe", file: "badframe.tar.zst", data: flipMiddle(zb), cause: "zstd", images: frame.Names})

	// Seekable zstd (what holdfast export writes), frames of 64 KiB decoded on
	// several workers: one byte flipped in a frame (caught by the frame's
	// checksum: the layers are random, so the frames hold raw blocks), the
	// file cut off in a frame, a seek table that lies about a frame's size.
	seek := build(t, fixture.ImageSpec{Names: []string{"e2e.local/bad/seekable:1"}, Layers: fixture.UniformLayers(2, 256<<10, false, 12)})
	sz := seekableZstd(t, archive(fixture.None, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerd}, seek)
	}))
	flipped := bytes.Clone(sz)
	flipped[len(flipped)/2] ^= 0x01
	lying := bytes.Clone(sz)
	// The seek table's last entry (12 bytes: compressed size, size, checksum)
	// ends where the 9-byte footer starts: its size one more.
	last := len(lying) - 9 - 12
	binary.LittleEndian.PutUint32(lying[last+4:], binary.LittleEndian.Uint32(lying[last+4:])+1)
	bads = append(bads,
		badInput{name: "seekable-flipped", file: "seekable-flipped.tar.zst", data: flipped, cause: "zstd: frame at offset", images: seek.Names},
		badInput{name: "seekable-truncated", file: "seekable-truncated.tar.zst", data: sz[:len(sz)*3/5], cause: "unexpected EOF", images: seek.Names},
		badInput{name: "seekable-lying-table", file: "seekable-lying-table.tar.zst", data: lying, cause: "decompresses to", images: seek.Names})

	// A tar that is not an image.
	junk := archive(fixture.None, func(ctx context.Context, w io.Writer) error { return fixture.WriteJunkTar(ctx, w, 9, 3) })
	bads = append(bads, badInput{name: "notimage", file: "notimage.tar", data: junk, cause: "not an image"})

	// A manifest pointing at a host-platform layer the archive lacks.
	missing := build(t, fixture.ImageSpec{Names: []string{"e2e.local/bad/missing-layer:1"}})
	lacking := archive(fixture.None, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteOCI(ctx, w, fixture.OCIOptions{
			Names:     fixture.NameContainerd,
			OmitBlobs: []digest.Digest{missing.Manifests[0].Layers[1].Digest()},
		}, missing)
	})
	bads = append(bads, badInput{name: "missing-layer", file: "missing-layer.tar", data: lacking, cause: "layer", images: missing.Names})

	// An untagged docker save.
	untagged := build(t, fixture.ImageSpec{Names: nil, Layers: fixture.UniformLayers(1, 32<<10, false, 10)})
	unnamed := archive(fixture.None, func(ctx context.Context, w io.Writer) error { return fixture.WriteDockerSave(ctx, w, untagged) })
	bads = append(bads, badInput{name: "untagged", file: "untagged.tar", data: unnamed, cause: "name"})

	// An OCI entry named only by ref.name "latest".
	bare := build(t, fixture.ImageSpec{Names: []string{"e2e.local/bad/baretag:latest"}})
	bareTag := archive(fixture.None, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameBareTag}, bare)
	})
	bads = append(bads, badInput{name: "baretag", file: "baretag.tar", data: bareTag, cause: "latest",
		images: []string{"e2e.local/bad/baretag:latest", "docker.io/library/latest:latest", "latest"}})
	return bads
}

// tent is one tar entry of a test archive.
type tent struct {
	hdr  tar.Header
	data []byte
}

func reg(name string, data []byte) tent {
	return tent{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), Format: tar.FormatPAX}, data: data}
}

func link(typ byte, name, target string) tent {
	return tent{hdr: tar.Header{Typeflag: typ, Name: name, Linkname: target, Mode: 0o777, Format: tar.FormatPAX}}
}

// tarOf writes entries as a tar and returns it with the offset at which each
// entry's header starts and the offset just past the last entry (where the
// end-of-archive blocks start).
func tarOf(t *testing.T, es []tent) (b []byte, starts []int, end int) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		if err := tw.Flush(); err != nil {
			t.Fatal(err)
		}
		starts = append(starts, buf.Len())
		h := e.hdr
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("writing %.64s: %v", h.Name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	end = buf.Len()
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), starts, end
}

func tarBytes(t *testing.T, es []tent) []byte {
	b, _, _ := tarOf(t, es)
	return b
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func blobEntry(b []byte) tent { return reg("blobs/sha256/"+digest.FromBytes(b).Encoded(), b) }

func descOf(mt string, b []byte) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: mt, Digest: digest.FromBytes(b), Size: int64(len(b))}
}

// smallImage is an OCI image laid out by hand: two uncompressed layers (each a
// real tar of one file of random bytes), a config for the host platform, a
// manifest, and the index.json entry naming it.
type smallImage struct {
	name             string
	layers           [][]byte
	config, manifest []byte
	configJSON       map[string]any
	layerTypes       []string
}

func newSmallImage(t *testing.T, name string, seed uint64, layerSize int) *smallImage {
	t.Helper()
	im := &smallImage{name: name}
	rng := rand.New(rand.NewPCG(seed, 0x6d616c66))
	var diffIDs []digest.Digest
	for i := range 2 {
		data := make([]byte, layerSize)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		l := tarBytes(t, []tent{reg(fmt.Sprintf("layer-%d.bin", i), data)})
		im.layers = append(im.layers, l)
		im.layerTypes = append(im.layerTypes, ocispec.MediaTypeImageLayer)
		diffIDs = append(diffIDs, digest.FromBytes(l))
	}
	im.configJSON = map[string]any{
		"os": "linux", "architecture": runtime.GOARCH,
		"config": map[string]any{"Env": []string{"PATH=/bin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
	}
	im.build(t)
	return im
}

// build makes config and manifest from configJSON, layers and layerTypes.
func (im *smallImage) build(t *testing.T) {
	im.config = mustJSON(t, im.configJSON)
	m := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    descOf(ocispec.MediaTypeImageConfig, im.config),
	}
	for i, l := range im.layers {
		m.Layers = append(m.Layers, descOf(im.layerTypes[i], l))
	}
	im.manifest = mustJSON(t, m)
}

func (im *smallImage) manifestDesc() ocispec.Descriptor {
	d := descOf(ocispec.MediaTypeImageManifest, im.manifest)
	d.Annotations = map[string]string{"io.containerd.image.name": im.name}
	return d
}

func indexOf(t *testing.T, descs ...ocispec.Descriptor) []byte {
	return mustJSON(t, ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Manifests: descs})
}

// entries lays the image out: oci-layout, index.json, manifest, config,
// layer 0, layer 1 — in that order.
func (im *smallImage) entries(t *testing.T) []tent {
	return []tent{
		reg("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)),
		reg("index.json", indexOf(t, im.manifestDesc())),
		blobEntry(im.manifest),
		blobEntry(im.config),
		blobEntry(im.layers[0]),
		blobEntry(im.layers[1]),
	}
}

func compressBytes(t *testing.T, c fixture.Compression, b []byte) []byte {
	t.Helper()
	out, err := fixture.CompressBytes(c, fixture.CompressOptions{}, b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// seekableZstd compresses data as holdfast export does (seekable zstd), in
// frames of 64 KiB.
func seekableZstd(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := zstdframe.NewWriter(&buf, zstdframe.Options{FrameSize: 64 << 10})
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func flipMiddle(b []byte) []byte {
	b = bytes.Clone(b)
	for i := len(b) / 2; i < len(b)/2+64 && i < len(b); i++ {
		b[i] ^= 0xA5
	}
	return b
}

func replaceEntry(es []tent, name string, e tent) []tent {
	out := append([]tent{}, es...)
	for i := range out {
		if out[i].hdr.Name == name {
			out[i] = e
			return out
		}
	}
	panic("no entry " + name)
}

func dropEntry(es []tent, name string) []tent {
	var out []tent
	for _, e := range es {
		if e.hdr.Name != name {
			out = append(out, e)
		}
	}
	return out
}

var compressionExt = map[fixture.Compression]string{
	fixture.Gzip: ".tar.gz", fixture.Zstd: ".tar.zst", fixture.Bzip2: ".tar.bz2", fixture.Xz: ".tar.xz", fixture.Lz4: ".tar.lz4",
}

// malformedKinds builds every kind. Causes were chosen from holdfast's
// messages: each names what is wrong in the words a user can act on.
func malformedKinds(t *testing.T) []badInput {
	t.Helper()
	var ks []badInput
	seed := uint64(100)
	add := func(name, ext, cause string, data func(im *smallImage) []byte) {
		seed++
		im := newSmallImage(t, "e2e.local/bad/"+name+":1", seed, 48<<10)
		// Causes may name the image's blobs.
		cause = strings.NewReplacer(
			"{config}", digest.FromBytes(im.config).String(),
			"{layer1}", digest.FromBytes(im.layers[1]).String(),
		).Replace(cause)
		ks = append(ks, badInput{name: name, file: name + ext, data: data(im), cause: cause, images: []string{im.name}})
	}

	// Truncated at each structural boundary of a plain tar. Entries: 0
	// oci-layout, 1 index.json, 2 manifest, 3 config, 4 layer 0, 5 layer 1.
	cut := func(at func(starts []int, end int) int) func(im *smallImage) []byte {
		return func(im *smallImage) []byte {
			b, starts, end := tarOf(t, im.entries(t))
			return b[:at(starts, end)]
		}
	}
	add("truncated-in-first-header", ".tar", "unexpected EOF", cut(func(s []int, _ int) int { return 300 }))
	add("truncated-in-config-header", ".tar", "unexpected EOF", cut(func(s []int, _ int) int { return s[3] + 200 }))
	add("truncated-after-manifest", ".tar", "without an end-of-archive marker", cut(func(s []int, _ int) int { return s[3] }))
	add("truncated-after-config", ".tar", "without an end-of-archive marker", cut(func(s []int, _ int) int { return s[4] }))
	add("truncated-in-layer-0", ".tar", "unexpected EOF", cut(func(s []int, _ int) int { return (s[4] + s[5]) / 2 }))
	add("truncated-in-layer-1", ".tar", "unexpected EOF", cut(func(s []int, end int) int { return (s[5] + end) / 2 }))
	add("truncated-before-end-blocks", ".tar", "without an end-of-archive marker", cut(func(_ []int, end int) int { return end }))
	add("truncated-gzip-stream", ".tar.gz", "gzip: unexpected EOF", func(im *smallImage) []byte {
		z := compressBytes(t, fixture.Gzip, tarBytes(t, im.entries(t)))
		return z[:len(z)*6/10]
	})

	// Bad frames, and trailing garbage after a valid stream, in each compression.
	for _, c := range []fixture.Compression{fixture.Gzip, fixture.Zstd, fixture.Bzip2, fixture.Xz, fixture.Lz4} {
		add("bad-frame-"+string(c), compressionExt[c], streamCause[c], func(im *smallImage) []byte {
			return flipMiddle(compressBytes(t, c, tarBytes(t, im.entries(t))))
		})
		add("trailing-garbage-"+string(c), compressionExt[c], streamCause[c], func(im *smallImage) []byte {
			z := compressBytes(t, c, tarBytes(t, im.entries(t)))
			return append(z, []byte("this is not part of any compressed stream, just garbage after it\n")...)
		})
	}

	// index.json and manifest.json.
	add("index-json-missing", ".tar", "not an image archive", func(im *smallImage) []byte {
		return tarBytes(t, dropEntry(im.entries(t), "index.json"))
	})
	add("index-json-invalid", ".tar", "index.json: unexpected end of JSON input", func(im *smallImage) []byte {
		return tarBytes(t, replaceEntry(im.entries(t), "index.json", reg("index.json", []byte(`{"schemaVersion":2,"manifests":[`))))
	})
	add("index-json-null", ".tar", "index.json lists no images", func(im *smallImage) []byte {
		return tarBytes(t, replaceEntry(im.entries(t), "index.json", reg("index.json", []byte("null"))))
	})
	add("index-json-huge", ".tar", "index.json: 34603008 bytes is too large (limit 33554432)", func(im *smallImage) []byte {
		pad := strings.Repeat(" ", 33<<20-len(indexOf(t, im.manifestDesc())))
		return tarBytes(t, replaceEntry(im.entries(t), "index.json", reg("index.json", append(indexOf(t, im.manifestDesc()), pad...))))
	})
	add("index-json-missing-manifest", ".tar", "is not in the archive", func(im *smallImage) []byte {
		return tarBytes(t, dropEntry(im.entries(t), "blobs/sha256/"+digest.FromBytes(im.manifest).Encoded()))
	})
	add("manifest-missing-config", ".tar", "config {config} is neither in the archive nor in the store", func(im *smallImage) []byte {
		return tarBytes(t, dropEntry(im.entries(t), "blobs/sha256/"+digest.FromBytes(im.config).Encoded()))
	})
	add("manifest-missing-layer", ".tar", "layer {layer1} is neither in the archive nor in the store", func(im *smallImage) []byte {
		return tarBytes(t, dropEntry(im.entries(t), "blobs/sha256/"+digest.FromBytes(im.layers[1]).Encoded()))
	})
	// docker save's manifest.json: the image laid out as docker save does.
	dockerSave := func(im *smallImage, mj []byte) []tent {
		es := []tent{reg("config.json", im.config), reg("l0/layer.tar", im.layers[0]), reg("l1/layer.tar", im.layers[1])}
		if mj != nil {
			es = append(es, reg("manifest.json", mj))
		}
		return es
	}
	goodMJ := func(im *smallImage) []byte {
		return mustJSON(t, []map[string]any{{"Config": "config.json", "RepoTags": []string{im.name}, "Layers": []string{"l0/layer.tar", "l1/layer.tar"}}})
	}
	add("manifest-json-missing", ".tar", "not an image archive", func(im *smallImage) []byte { return tarBytes(t, dockerSave(im, nil)) })
	add("manifest-json-invalid", ".tar", "manifest.json: unexpected end of JSON input", func(im *smallImage) []byte {
		return tarBytes(t, dockerSave(im, []byte(`[{"Config":`)))
	})
	add("manifest-json-null", ".tar", "manifest.json lists no images", func(im *smallImage) []byte {
		return tarBytes(t, dockerSave(im, []byte("null")))
	})
	add("manifest-json-huge", ".tar", "manifest.json: 34603008 bytes is too large (limit 33554432)", func(im *smallImage) []byte {
		mj := goodMJ(im)
		return tarBytes(t, dockerSave(im, append(mj, strings.Repeat("\n", 33<<20-len(mj))...)))
	})
	add("manifest-json-missing-layer", ".tar", `layer "l1/layer.tar" is not in the archive`, func(im *smallImage) []byte {
		es := dockerSave(im, goodMJ(im))
		return tarBytes(t, append(es[:2:2], es[3]))
	})

	// Blobs and entries.
	var flipped []byte
	add("layer-digest-mismatch", ".tar", "unexpected commit digest", func(im *smallImage) []byte {
		es := im.entries(t)
		es[5].data = bytes.Clone(es[5].data)
		es[5].data[len(es[5].data)/2] ^= 1
		flipped = es[5].data
		return tarBytes(t, es)
	})
	ks[len(ks)-1].directCause = "its bytes have digest " + digest.FromBytes(flipped).String()
	add("config-digest-mismatch", ".tar", "content has digest", func(im *smallImage) []byte {
		es := im.entries(t)
		es[3].data = bytes.Replace(es[3].data, []byte(`"PATH=/bin"`), []byte(`"PATH=/sbn"`), 1)
		return tarBytes(t, es)
	})
	add("descriptor-size-mismatch", ".tar", "its descriptor says", func(im *smallImage) []byte {
		d := im.manifestDesc()
		d.Size++
		return tarBytes(t, replaceEntry(im.entries(t), "index.json", reg("index.json", indexOf(t, d))))
	})
	add("duplicate-entry-different-bytes", ".tar", "appears twice in the archive", func(im *smallImage) []byte {
		es := im.entries(t)
		dup := es[4]
		dup.data = bytes.Repeat([]byte{0}, len(dup.data))
		return tarBytes(t, append(es, dup))
	})
	add("duplicate-index-json", ".tar", "index.json appears twice in the archive", func(im *smallImage) []byte {
		return tarBytes(t, append(im.entries(t), reg("index.json", indexOf(t))))
	})
	add("absolute-entry-name", ".tar", "is absolute", func(im *smallImage) []byte {
		return tarBytes(t, append(im.entries(t), reg("/etc/holdfast-test", []byte("x"))))
	})
	add("dotdot-entry-name", ".tar", `has a ".." element`, func(im *smallImage) []byte {
		return tarBytes(t, append(im.entries(t), reg("blobs/../../holdfast-test", []byte("x"))))
	})
	add("very-long-entry-name", ".tar", "is longer than 4096 bytes", func(im *smallImage) []byte {
		return tarBytes(t, append(im.entries(t), reg(strings.Repeat("d/", 3000)+"f", []byte("x"))))
	})
	add("symlink-outside", ".tar", "points outside the archive", func(im *smallImage) []byte {
		es := dockerSave(im, goodMJ(im))
		return tarBytes(t, append(es[:2:2], link(tar.TypeSymlink, "l1/layer.tar", "../../../etc/shadow"), es[3]))
	})
	add("hardlink-outside", ".tar", "points outside the archive", func(im *smallImage) []byte {
		es := dockerSave(im, goodMJ(im))
		return tarBytes(t, append(es[:2:2], link(tar.TypeLink, "l1/layer.tar", "/etc/shadow"), es[3]))
	})
	add("symlink-loop", ".tar", `layer "l1/layer.tar" is not in the archive`, func(im *smallImage) []byte {
		es := dockerSave(im, goodMJ(im))
		return tarBytes(t, append(es[:2:2], link(tar.TypeSymlink, "l1/layer.tar", "loop.tar"), link(tar.TypeSymlink, "l1/loop.tar", "layer.tar"), es[3]))
	})
	add("nested-indexes-too-deep", ".tar", "indexes nested more than 8 deep", func(im *smallImage) []byte {
		es := im.entries(t)[:1]
		es = append(es, im.entries(t)[2:]...)
		inner := descOf(ocispec.MediaTypeImageManifest, im.manifest)
		for range 12 {
			idx := indexOf(t, inner)
			es = append(es, blobEntry(idx))
			inner = descOf(ocispec.MediaTypeImageIndex, idx)
		}
		inner.Annotations = map[string]string{"io.containerd.image.name": im.name}
		return tarBytes(t, append(es, reg("index.json", indexOf(t, inner))))
	})
	add("index-refers-to-itself", ".tar", "content has digest", func(im *smallImage) []byte {
		// A document cannot hold its own digest: the only way to write one is
		// under a name that is not its digest.
		self := digest.FromString("an index that lists itself")
		idx := indexOf(t, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageIndex, Digest: self, Size: 200})
		d := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageIndex, Digest: self, Size: int64(len(idx)), Annotations: map[string]string{"io.containerd.image.name": im.name}}
		return tarBytes(t, []tent{reg("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)), reg("index.json", indexOf(t, d)), reg("blobs/sha256/"+self.Encoded(), idx)})
	})
	add("config-without-os-arch", ".tar", "no os/architecture", func(im *smallImage) []byte {
		delete(im.configJSON, "os")
		delete(im.configJSON, "architecture")
		im.build(t)
		return tarBytes(t, im.entries(t))
	})
	add("unknown-layer-media-type", ".tar", `media type "application/vnd.example.unknown.layer", which containerd cannot unpack`, func(im *smallImage) []byte {
		im.layerTypes[1] = "application/vnd.example.unknown.layer"
		im.build(t)
		return tarBytes(t, im.entries(t))
	})
	add("bzip2-compressed-layer", ".tar", "is bzip2-compressed; containerd cannot unpack such layers", func(im *smallImage) []byte {
		im.layers[1] = compressBytes(t, fixture.Bzip2, im.layers[1])
		return tarBytes(t, dockerSave(im, goodMJ(im)))
	})
	add("docker-schema-1", ".tar", "docker schema 1 manifests are not supported", func(im *smallImage) []byte {
		m := []byte(`{"schemaVersion":1,"name":"e2e.local/bad/schema1","tag":"1","fsLayers":[]}`)
		d := descOf("", m)
		d.Annotations = map[string]string{"io.containerd.image.name": im.name}
		return tarBytes(t, []tent{reg("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)), reg("index.json", indexOf(t, d)), blobEntry(m)})
	})
	add("invalid-digest", ".tar", `digest "sha256:not-hex"`, func(im *smallImage) []byte {
		idx := []byte(`{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:not-hex","size":10,"annotations":{"io.containerd.image.name":"` + im.name + `"}}]}`)
		return tarBytes(t, replaceEntry(im.entries(t), "index.json", reg("index.json", idx)))
	})
	add("bad-header-checksum", ".tar", "invalid tar header", func(im *smallImage) []byte {
		b, starts, _ := tarOf(t, im.entries(t))
		b = bytes.Clone(b)
		b[starts[4]+10] ^= 0x20 // a byte of the layer's header name: the checksum no longer adds up
		return b
	})
	add("sparse-entry", ".tar", "sparse tar entries are not supported", func(im *smallImage) []byte {
		// An old GNU sparse header ('S'), as GNU tar --sparse writes it.
		es := append(im.entries(t), tent{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "sparse.bin", Mode: 0o644, Format: tar.FormatGNU}})
		b, starts, _ := tarOf(t, es)
		b = bytes.Clone(b)
		h := b[starts[len(starts)-1]:][:512]
		h[156] = tar.TypeGNUSparse
		copy(h[483:495], "77777777777\x00") // real size: 8 GiB of holes
		copy(h[148:156], "        ")
		var sum int64
		for _, c := range h {
			sum += int64(c)
		}
		copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
		return b
	})
	add("gzip-of-text", ".tar.gz", "not a tar archive (gzip-compressed)", func(*smallImage) []byte {
		return compressBytes(t, fixture.Gzip, bytes.Repeat([]byte("a log line, not a tar archive\n"), 100))
	})

	// Not archives at all, named as archives: the operator meant an archive,
	// so each is a failed source naming the cause, never skipped.
	ks = append(ks,
		badInput{name: "zero-byte-file", file: "zero-byte-file.tar", data: nil, cause: "not a tar archive: empty stream"},
		badInput{name: "one-byte-file", file: "one-byte-file.tar.gz", data: []byte{0x1f}, cause: "not a tar archive"},
		badInput{name: "not-tar-with-tar-suffix", file: "not-tar-with-tar-suffix.tar", data: bytes.Repeat([]byte("PNG? no, just text\n"), 100), cause: "not a tar archive"},
	)
	// Not named as an archive and not one: classified by its bytes, skipped (at debug level).
	ks = append(ks, badInput{name: "text-file", file: "text-file.log", data: bytes.Repeat([]byte("a log line\n"), 100), skip: true})

	// A million empty entries, zstd-compressed (~512 MiB of tar headers).
	ks = append(ks, badInput{name: "million-tiny-entries", file: "million-tiny-entries.tar.zst", data: millionEntries(t), cause: "archive has more than 131072 entries"})
	return ks
}

// streamCause is what an error about a broken compressed stream names: the
// decoder, for a bad frame and for garbage after a valid stream alike.
var streamCause = map[fixture.Compression]string{
	fixture.Gzip: "gzip: ", fixture.Zstd: "zstd: ", fixture.Bzip2: "bzip2", fixture.Xz: "xz: ", fixture.Lz4: "lz4: ",
}

// millionEntries is a zstd-compressed tar of 1,000,000 empty files.
func millionEntries(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	h := tar.Header{Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatUSTAR}
	for i := range 1_000_000 {
		h.Name = fmt.Sprintf("f/%07d", i)
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// hostileInputs are small files that decompress to a lot, or declare
// decoder windows and dictionaries of gigabytes; free is what the images
// dir's filesystem has, from which the layer bomb's --min-free is set.
func hostileInputs(t *testing.T, free int64) []badInput {
	t.Helper()
	im := newSmallImage(t, "e2e.local/hostile/base:1", 7, 32<<10)
	plain := tarBytes(t, im.entries(t))

	// A layer of 10 GiB of zeros: the tar header says so, and the manifest
	// too; the digest named is not that of the zeros (no one hashes 10 GiB
	// for a test), and it does not matter: the space check refuses it first.
	bombLayer := func(w io.Writer) {
		const size = 10 << 30
		fake := digest.FromString("10 GiB of zeros")
		im2 := newSmallImage(t, "e2e.local/hostile/gzip-bomb-layer:1", 8, 1<<10)
		im2.layers[1] = nil
		im2.build(t)
		m := bytes.Replace(im2.manifest, []byte(fmt.Sprintf(`"digest":"%s","size":0`, digest.FromBytes(nil))), []byte(fmt.Sprintf(`"digest":"%s","size":%d`, fake, int64(size))), 1)
		md := descOf(ocispec.MediaTypeImageManifest, m)
		md.Annotations = map[string]string{"io.containerd.image.name": im2.name}
		head, _, end := tarOf(t, []tent{
			reg("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)),
			reg("index.json", indexOf(t, md)),
			blobEntry(m), blobEntry(im2.config), blobEntry(im2.layers[0]),
		})
		// The layer's header: the tar writer writes it at once; its data
		// comes as gzip members of zeros.
		var hb bytes.Buffer
		h := reg("blobs/sha256/"+fake.Encoded(), nil).hdr
		h.Size = size
		if err := tar.NewWriter(&hb).WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		hdrStart := end
		gz := gzip.NewWriter(w)
		gz.Write(head[:hdrStart])
		gz.Write(hb.Bytes())
		gz.Close()
		gzipZeros(t, w, size)
		gz = gzip.NewWriter(w)
		gz.Write(make([]byte, 1024)) // end-of-archive blocks
		gz.Close()
	}

	minFree := fmt.Sprintf("%dMiB", (free-4<<30)>>20) // a 10 GiB blob does not fit, a small one does
	firstFrame := zstdFrame(20, plain, 0)
	return []badInput{
		{name: "zstd-2gib-window", file: "zstd-2gib-window.tar.zst",
			cause: "zstd: a frame declares a 2 GiB window, more than the 128 MiB holdfast decodes",
			write: func(w io.Writer) { w.Write(zstdFrame(31, plain, 2<<30)) }},
		{name: "zstd-2gib-window-second-frame", file: "zstd-second-frame.tar.zst",
			// Found before it is decoded, where the frame starts.
			cause: fmt.Sprintf("zstd: the frame at offset %d declares a 2 GiB window, more than the 128 MiB holdfast decodes", len(firstFrame)),
			write: func(w io.Writer) {
				w.Write(firstFrame)
				w.Write(zstdFrame(31, nil, 2<<30))
			}},
		{name: "xz-1536mib-dictionary", file: "xz-dict.tar.xz",
			cause: "xz: the stream declares a 1536 MiB dictionary, more than the 128 MiB holdfast decodes",
			write: func(w io.Writer) { w.Write(xzWithDict(t, plain, 200<<20, 37)) }},
		{name: "xz-1536mib-dictionary-second-stream", file: "xz-dict-second.tar.xz",
			cause: "xz: a block declares a dictionary larger than the 128 MiB holdfast decodes",
			write: func(w io.Writer) {
				w.Write(xzWithDict(t, plain[:len(plain)-1024], 0, 22)) // the tar without its end blocks, an 8 MiB dictionary
				w.Write(xzWithDict(t, nil, 200<<20, 37))               // then the end blocks' zeros, and more
			}},
		{name: "zstd-10gib-zeros-after-the-archive", file: "zstd-trailing-bomb.tar.zst",
			cause: "more than 16 MiB of data after the end of the tar archive",
			write: func(w io.Writer) { w.Write(zstdFrame(20, plain, 10<<30)) }},
		// The same in frames of 16 MiB, the largest decoded whole on several
		// workers: the frames in flight, not the stream, bound the memory.
		{name: "zstd-frames-10gib-zeros-after-the-archive", file: "zstd-frames-trailing-bomb.tar.zst",
			cause: "more than 16 MiB of data after the end of the tar archive",
			write: func(w io.Writer) {
				w.Write(zstdFrame(20, plain, 0))
				zeros := zstdFrame(24, nil, 16<<20)
				for range 640 {
					w.Write(zeros)
				}
			}},
		{name: "gzip-10gib-zero-layer", file: "gzip-bomb-layer.tar.gz",
			cause: "must stay free (--min-free)", write: bombLayer, extra: []string{"--min-free", minFree}},
	}
}

// zstdFrame writes a zstd frame by hand: a header declaring the window
// 2^windowLog (no content size, no checksum), raw blocks of data, then zeros
// RLE blocks of zeros.
func zstdFrame(windowLog int, data []byte, zeros int64) []byte {
	b := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, byte(windowLog-10) << 3}
	const maxBlock = 128 << 10
	type blk struct {
		typ  uint32
		n    int
		data []byte
	}
	var blocks []blk
	for len(data) > 0 {
		n := min(len(data), maxBlock)
		blocks = append(blocks, blk{0, n, data[:n]})
		data = data[n:]
	}
	for zeros > 0 {
		n := int(min(zeros, maxBlock))
		blocks = append(blocks, blk{1, n, []byte{0}})
		zeros -= int64(n)
	}
	for i, bl := range blocks {
		h := bl.typ<<1 | uint32(bl.n)<<3
		if i == len(blocks)-1 {
			h |= 1
		}
		b = append(b, byte(h), byte(h>>8), byte(h>>16))
		b = append(b, bl.data...)
	}
	return b
}

// gzipZeros is a multi-member gzip stream of n zeros: one member of 64 MiB
// of zeros, repeated (gzip readers join members), so that 10 GiB costs a
// moment to write.
func gzipZeros(t *testing.T, w io.Writer, n int64) {
	t.Helper()
	const chunk = 64 << 20
	member := func(size int64) []byte {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		if _, err := io.Copy(zw, io.LimitReader(zeroReader{}, size)); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	full := member(chunk)
	for ; n >= chunk; n -= chunk {
		if _, err := w.Write(full); err != nil {
			t.Fatal(err)
		}
	}
	if n > 0 {
		if _, err := w.Write(member(n)); err != nil {
			t.Fatal(err)
		}
	}
}

// xzWithDict compresses b with xz and rewrites the first block's LZMA2
// dictionary size to the code dictCode (37: 1536 MiB), fixing the block
// header's CRC32. The encoded data does not depend on it.
func xzWithDict(t *testing.T, b []byte, trailingZeros int64, dictCode byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := fixture.Compress(&buf, fixture.Xz, fixture.CompressOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(w, io.LimitReader(zeroReader{}, trailingZeros)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	x := buf.Bytes()
	blk := x[12:]
	size := (int(blk[0]) + 1) * 4
	if blk[1]&0xc0 != 0 || blk[2] != 0x21 || blk[3] != 1 {
		t.Fatalf("unexpected xz block header % x", blk[:size])
	}
	blk[4] = dictCode
	binary.LittleEndian.PutUint32(blk[size-4:], crc32.ChecksumIEEE(blk[:size-4]))
	return x
}

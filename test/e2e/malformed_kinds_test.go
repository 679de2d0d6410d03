package e2e

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// A malformed kind is one archive file that holdfast must refuse (or skip),
// built in memory from a small image the test lays out itself, entry by
// entry, so that every structural boundary is known.
type malformed struct {
	name  string // the subtest; the file is name + ext
	ext   string
	data  []byte
	skip  bool   // not an archive at all: skipped, no error
	cause string // what the error must contain besides the file's name
	// directCause replaces cause on --write-path=direct, where holdfast
	// checks a blob's bytes itself before containerd sees them.
	directCause string
	image       string // the name the archive gives its image: never recorded
}

func (m malformed) file() string { return m.name + m.ext }

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
func malformedKinds(t *testing.T) []malformed {
	t.Helper()
	var ks []malformed
	seed := uint64(100)
	add := func(name, ext, cause string, data func(im *smallImage) []byte) {
		seed++
		im := newSmallImage(t, "e2e.local/bad/"+name+":1", seed, 48<<10)
		// Causes may name the image's blobs.
		cause = strings.NewReplacer(
			"{config}", digest.FromBytes(im.config).String(),
			"{layer1}", digest.FromBytes(im.layers[1]).String(),
		).Replace(cause)
		ks = append(ks, malformed{name: name, ext: ext, data: data(im), cause: cause, image: im.name})
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
		add("bad-frame-"+string(c), compressionExt[c], badFrameCause[c], func(im *smallImage) []byte {
			return flipMiddle(compressBytes(t, c, tarBytes(t, im.entries(t))))
		})
		add("trailing-garbage-"+string(c), compressionExt[c], trailingCause[c], func(im *smallImage) []byte {
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
		malformed{name: "zero-byte-file", ext: ".tar", data: nil, cause: "not a tar archive: empty stream"},
		malformed{name: "one-byte-file", ext: ".tar.gz", data: []byte{0x1f}, cause: "not a tar archive"},
		malformed{name: "not-tar-with-tar-suffix", ext: ".tar", data: bytes.Repeat([]byte("PNG? no, just text\n"), 100), cause: "not a tar archive"},
	)
	// Not named as an archive and not one: classified by its bytes, skipped (at debug level).
	ks = append(ks, malformed{name: "text-file", ext: ".log", data: bytes.Repeat([]byte("a log line\n"), 100), skip: true})

	// A million empty entries, zstd-compressed (~512 MiB of tar headers).
	ks = append(ks, malformed{name: "million-tiny-entries", ext: ".tar.zst", data: millionEntries(t), cause: "archive has more than 131072 entries"})
	return ks
}

var badFrameCause = map[fixture.Compression]string{
	fixture.Gzip: "gzip: ", fixture.Zstd: "zstd: ", fixture.Bzip2: "bzip2", fixture.Xz: "xz: ", fixture.Lz4: "lz4: ",
}

var trailingCause = map[fixture.Compression]string{
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

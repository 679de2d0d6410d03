package archive

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/archive/zstdframe"
)

// TestWalkHostileEntries: entries an image writer never makes are refused,
// each with its own cause.
func TestWalkHostileEntries(t *testing.T) {
	t.Parallel()
	im := makeImage(t, "amd64", None, "x")
	idx := indexJSON(t, withAnnotations(im.manifest.desc(), annotationContainerdName, "a:1"))
	good := ociEntries("", idx, im.blobs()...)
	with := func(extra ...entry) []byte { return tarBytes(t, append(append([]entry{}, good...), extra...)) }
	layerName := "blobs/sha256/" + im.layers[0].digest().Encoded()
	odd := blob{"application/vnd.example.unknown", []byte("not a layer anyone can unpack")}
	oddManifest := blob{ocispec.MediaTypeImageManifest, manifestJSON(t, im.config, []blob{odd})}
	artifactCfg := blob{ocispec.MediaTypeImageConfig, configJSON(t, "unknown", "unknown")}
	artifact := blob{ocispec.MediaTypeImageManifest, manifestJSON(t, artifactCfg, []blob{odd})}
	for _, tc := range []struct {
		name string
		in   []byte
		err  string // "" means the walk succeeds
	}{
		{"duplicate blob, different bytes", with(entry{name: layerName, data: bytes.Repeat([]byte{'z'}, len(im.layers[0].data))}), "appears twice"},
		{"duplicate index.json", with(entry{name: "index.json", data: indexJSON(t)}), "index.json appears twice"},
		{"absolute name", with(entry{name: "/etc/passwd", data: []byte("root")}), `entry name "/etc/passwd" is absolute`},
		{"dot-dot name", with(entry{name: "blobs/../../x", data: []byte("x")}), `entry name "blobs/../../x" has a ".." element`},
		{"symlink outside", with(entry{name: "l", typ: tar.TypeSymlink, link: "../../etc/shadow"}), `symlink l points outside the archive`},
		{"absolute symlink", with(entry{name: "l", typ: tar.TypeSymlink, link: "/etc/shadow"}), `symlink l points outside the archive`},
		{"hardlink outside", with(entry{name: "h", typ: tar.TypeLink, link: "../x"}), `hardlink h points outside the archive`},
		{"symlink inside", with(entry{name: "d/l", typ: tar.TypeSymlink, link: "../" + layerName}), ""},
		{"unknown layer media type", tarBytes(t, ociEntries("", indexJSON(t, withAnnotations(oddManifest.desc(), annotationContainerdName, "a:1")), oddManifest, im.config, odd)), `media type "application/vnd.example.unknown"`},
		{"artifact layer media type", tarBytes(t, ociEntries("", indexJSON(t, withAnnotations(im.manifest.desc(), annotationContainerdName, "a:1"), withAnnotations(artifact.desc(), annotationContainerdName, "b:1")), append(im.blobs(), artifact, artifactCfg, odd)...)), ""},
	} {
		for _, mode := range walkModes {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				_, err := walkAs(t.Context(), mode, tc.in, newMemStore())
				switch {
				case tc.err == "" && err != nil:
					t.Fatalf("error %v, want none", err)
				case tc.err != "" && err == nil:
					t.Fatalf("no error, want one containing %q", tc.err)
				case tc.err != "" && !strings.Contains(err.Error(), tc.err):
					t.Errorf("error %q, want one containing %q", err, tc.err)
				}
			})
		}
	}
}

// TestWalkTrailingData: a compressed archive may carry some padding after the
// end of the tar archive, not gigabytes of it.
func TestWalkTrailingData(t *testing.T) {
	t.Parallel()
	im := makeImage(t, "amd64", None, "x")
	plain := tarBytes(t, ociEntries("", indexJSON(t, withAnnotations(im.manifest.desc(), annotationContainerdName, "a:1")), im.blobs()...))
	for _, tc := range []struct {
		name  string
		extra int64
		ok    bool
	}{
		{"record padding", 10 << 10, true},
		{"bomb", 64 << 20, false},
	} {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(plain)
		io.Copy(zw, io.LimitReader(zeros{}, tc.extra))
		zw.Close()
		_, err := walkAs(t.Context(), "stream", buf.Bytes(), newMemStore())
		if tc.ok && err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "after the end of the tar archive")) {
			t.Errorf("%s: error %v, want one about data after the end of the tar archive", tc.name, err)
		}
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// xzHeader is the start of an xz stream whose first block's LZMA2 filter
// declares the dictionary size code dict; the rest does not matter.
func xzHeader(dict byte) []byte {
	b := append([]byte{}, magicXz...)
	flags := []byte{0, 0x01} // CRC32 check
	b = append(b, flags...)
	b = binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(flags))
	blk := []byte{0, 0x00, 0x21, 0x01, dict, 0, 0, 0} // size byte, flags (1 filter), LZMA2, 1 byte of props, padding
	blk[0] = byte((len(blk)+4)/4 - 1)
	blk = binary.LittleEndian.AppendUint32(blk, crc32.ChecksumIEEE(blk))
	b = append(b, blk...)
	return append(b, make([]byte, 64)...)
}

// TestDecoderMemoryCaps: frames that declare more history than the cap are
// refused before the decoder allocates it, with a message that says so.
func TestDecoderMemoryCaps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   []byte
		err  string // "" means the header is accepted
	}{
		{"zstd 128 MiB window", zstdRawFrame(17<<3, []byte("hello")), ""},
		{"zstd 2 GiB window", zstdRawFrame(21<<3, []byte("hello")), "zstd: a frame declares a 2 GiB window, more than the 128 MiB holdfast decodes"},
		{"zstd 4 GiB window", zstdRawFrame(22<<3, []byte("hello")), "more than the 128 MiB holdfast decodes"},
		{"xz 4 GiB dictionary", xzHeader(40), "xz: the stream declares a 4 GiB dictionary, more than the 128 MiB holdfast decodes"},
		{"xz 1536 MiB dictionary", xzHeader(37), "more than the 128 MiB holdfast decodes"},
		{"xz 1536 MiB dictionary in a second stream", append(compress(t, Xz, []byte("hello")), xzHeader(37)...),
			"xz: a block declares a dictionary larger than the 128 MiB holdfast decodes"},
	} {
		rc, _, err := Decompress(bytes.NewReader(tc.in))
		if err == nil {
			_, err = io.ReadAll(rc)
			rc.Close()
		}
		if tc.err == "" {
			if err != nil && strings.Contains(err.Error(), "holdfast decodes") {
				t.Errorf("%s: refused: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.err)
		}
	}
}

// FuzzDecoderHeaders: the header checks read untrusted bytes before any
// decoder does; they must never panic, whatever they are given.
func FuzzDecoderHeaders(f *testing.F) {
	f.Add(zstdRawFrame(21<<3, []byte("hello")))
	f.Add(xzHeader(40))
	f.Add(append([]byte{0x50, 0x2a, 0x4d, 0x18, 2, 0, 0, 0, 1, 2}, zstdRawFrame(17<<3, nil)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = zstdframe.CheckWindow(b, zstdMaxWindow)
		_ = checkXzDict(b, xzMaxDict)
		if len(b) > 12 {
			_ = checkXzDict(append(append([]byte{}, magicXz...), b...), xzMaxDict)
		}
	})
}

// TestXzStreamsConcatenated: streams one after another (xz's own concatenation,
// pixz, parallel writers) decode as one, each within the cap.
func TestXzStreamsConcatenated(t *testing.T) {
	t.Parallel()
	a, b := compressible(300<<10, 3), compressible(200<<10, 4)
	in := append(compress(t, Xz, a), compress(t, Xz, b)...)
	rc, c, err := Decompress(bytes.NewReader(in))
	if err != nil || c != Xz {
		t.Fatalf("Decompress: %s, %v", c, err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, append(a, b...)) {
		t.Errorf("decoded %d bytes, not the %d of both streams", len(got), len(a)+len(b))
	}
}

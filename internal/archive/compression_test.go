package archive

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	"github.com/pierrec/lz4/v4"
	"github.com/ulikunitz/xz/lzma"
)

// compressible returns n bytes of pseudo-random text that compresses a bit.
func compressible(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	words := []string{"layer", "blob", "digest", "sha256", "config", "manifest", "index", "tar", "\n", " "}
	var b bytes.Buffer
	for b.Len() < n {
		if r.IntN(8) == 0 {
			var x [8]byte
			binary.LittleEndian.PutUint64(x[:], r.Uint64())
			b.Write(x[:])
		} else {
			b.WriteString(words[r.IntN(len(words))])
		}
	}
	return b.Bytes()[:n]
}

func TestSniff(t *testing.T) {
	t.Parallel()
	skippable := func(id byte, payload []byte, next []byte) []byte {
		b := []byte{0x50 | id, 0x2a, 0x4d, 0x18, 0, 0, 0, 0}
		binary.LittleEndian.PutUint32(b[4:], uint32(len(payload)))
		return append(append(b, payload...), next...)
	}
	zstdFrame := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x04, 0x00}
	lz4Frame := []byte{0x04, 0x22, 0x4d, 0x18, 0x64, 0x40}
	tarHeader := tarBytes(t, []entry{{name: "manifest.json", data: []byte("[]")}})
	for _, tc := range []struct {
		name string
		in   []byte
		want Compression
	}{
		{"empty", nil, None},
		{"gzip", []byte{0x1f, 0x8b, 0x08, 0x00}, Gzip},
		{"gzip magic only", []byte{0x1f, 0x8b}, Gzip},
		{"zstd", zstdFrame, Zstd},
		{"bzip2", []byte("BZh91AY&SY\x00\x00"), Bzip2},
		{"bzip2 empty stream", []byte("BZh9\x17\x72\x45\x38\x50\x90\x00\x00\x00\x00"), Bzip2},
		{"bzip2 short", []byte("BZh9"), Bzip2},
		{"BZh-named tar member", append([]byte("BZh1-notes.txt"), make([]byte, 20)...), None},
		{"BZh without level", []byte("BZhx1AY&SY"), None},
		{"xz", []byte{0xfd, '7', 'z', 'X', 'Z', 0x00, 0x00, 0x04}, Xz},
		{"xz truncated magic", []byte{0xfd, '7', 'z', 'X', 'Z'}, None},
		{"lz4", lz4Frame, Lz4},
		{"lz4 legacy", []byte{0x02, 0x21, 0x4c, 0x18, 0, 0, 0, 0}, Lz4},
		{"skippable then zstd", skippable(0, []byte("meta"), zstdFrame), Zstd},
		{"two skippables then zstd", skippable(3, nil, skippable(15, []byte("x"), zstdFrame)), Zstd},
		{"skippable then lz4", skippable(0, []byte("meta"), lz4Frame), Lz4},
		{"skippable past the buffer", skippable(0, make([]byte, 100), nil)[:50], Zstd},
		{"skippable header only", []byte{0x5a, 0x2a, 0x4d, 0x18}, Zstd},
		{"skippable then junk", skippable(0, []byte("meta"), []byte("plain text here")), None},
		{"plain tar", tarHeader, None},
		{"text", []byte("hello, world"), None},
	} {
		if got := Sniff(tc.in); got != tc.want {
			t.Errorf("%s: Sniff = %s, want %s", tc.name, got, tc.want)
		}
	}
}

var allCompressions = []Compression{None, Gzip, Zstd, Bzip2, Xz, Lz4}

func TestDecompress(t *testing.T) {
	t.Parallel()
	payload := compressible(1<<20, 1)
	for _, c := range allCompressions {
		t.Run(string(c), func(t *testing.T) {
			t.Parallel()
			z := compress(t, c, payload)
			rc, got, err := Decompress(bytes.NewReader(z))
			if err != nil {
				t.Fatal(err)
			}
			if got != c {
				t.Errorf("compression = %s, want %s", got, c)
			}
			out, err := io.ReadAll(rc)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, payload) {
				t.Errorf("decompressed %d bytes, not the %d written", len(out), len(payload))
			}
			if err := rc.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if err := rc.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
		})
	}
}

// Drain decodes what Decompress decodes, and a stream cut off is an error
// that names its compression, as it is to a walk.
func TestDrain(t *testing.T) {
	t.Parallel()
	payload := compressible(3*aheadBlockSize+123, 4)
	for _, c := range allCompressions {
		t.Run(string(c), func(t *testing.T) {
			t.Parallel()
			z := compress(t, c, payload)
			n, got, err := Drain(bytes.NewReader(z))
			if err != nil || got != c || n != int64(len(payload)) {
				t.Fatalf("Drain = %d, %s, %v; want %d, %s", n, got, err, len(payload), c)
			}
			if c == None {
				return
			}
			_, _, err = Drain(bytes.NewReader(z[:len(z)*2/3]))
			if err == nil || !strings.HasPrefix(err.Error(), string(c)+": ") {
				t.Errorf("Drain of a truncated stream: %v, want an error naming %s", err, c)
			}
		})
	}
}

// TestDecompressTruncated cuts every compressed stream at several places: each
// cut must end in an error that names the compression, never in io.EOF.
func TestDecompressTruncated(t *testing.T) {
	t.Parallel()
	payload := compressible(256<<10, 2)
	lz4NoChecksum := func() []byte {
		var buf bytes.Buffer
		w := lz4.NewWriter(&buf)
		if err := w.Apply(lz4.ChecksumOption(false), lz4.BlockSizeOption(lz4.Block64Kb)); err != nil {
			t.Fatal(err)
		}
		w.Write(payload)
		w.Close()
		return buf.Bytes()
	}
	type stream struct {
		name string
		c    Compression
		z    []byte
	}
	var streams []stream
	for _, c := range allCompressions[1:] {
		streams = append(streams, stream{string(c), c, compress(t, c, payload)})
	}
	streams = append(streams, stream{"lz4 without content checksum", Lz4, lz4NoChecksum()})
	for _, s := range streams {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			// From just past the magic to one byte short, in ~60 steps, plus the last 16 cuts.
			cuts := map[int]bool{}
			step := max(1, len(s.z)/60)
			for cut := 6; cut < len(s.z); cut += step {
				cuts[cut] = true
			}
			for cut := max(6, len(s.z)-16); cut < len(s.z); cut++ {
				cuts[cut] = true
			}
			for cut := range cuts {
				rc, got, err := Decompress(bytes.NewReader(s.z[:cut]))
				if err == nil {
					if got != s.c {
						t.Fatalf("cut %d: compression %s", cut, got)
					}
					_, err = io.Copy(io.Discard, rc)
					rc.Close()
				}
				if err == nil {
					t.Errorf("cut at %d of %d bytes: no error", cut, len(s.z))
					continue
				}
				if !strings.HasPrefix(err.Error(), string(s.c)+": ") {
					t.Errorf("cut at %d: error %q does not name %s", cut, err, s.c)
				}
			}
		})
	}
}

func TestDecompressErrorMessage(t *testing.T) {
	t.Parallel()
	z := compress(t, Zstd, compressible(64<<10, 3))
	rc, _, err := Decompress(bytes.NewReader(z[:len(z)/2]))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	_, err = io.Copy(io.Discard, rc)
	if err == nil || err.Error() != "zstd: unexpected EOF" {
		t.Fatalf("error = %v, want zstd: unexpected EOF", err)
	}
	if !errorsIs(err, io.ErrUnexpectedEOF) {
		t.Errorf("error does not wrap io.ErrUnexpectedEOF")
	}
}

// TestZstdLargeWindow decodes a frame whose header declares a 64 MiB window,
// more than the 32 MiB some decoders accept by default.
func TestZstdLargeWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("encodes 40 MiB")
	}
	t.Parallel()
	// Random data repeated 40 MiB apart: matches at that distance only fit a
	// window larger than 32 MiB.
	payload := bytes.Repeat(compressible(8<<20, 4), 5)
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf, zstd.WithWindowSize(64<<20), zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(payload); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	z := buf.Bytes()
	var h zstd.Header
	if err := h.Decode(z); err != nil {
		t.Fatal(err)
	}
	if h.SingleSegment || h.WindowSize <= 32<<20 {
		t.Fatalf("frame header: single segment %v, window %d; want a window > 32 MiB", h.SingleSegment, h.WindowSize)
	}
	// Also check the raw window descriptor byte: exponent + 10 = log2(window base).
	if fhd := z[4]; fhd&0x20 != 0 {
		t.Fatalf("frame header descriptor %#x has Single_Segment set", fhd)
	}
	if exp := int(z[5] >> 3); exp+10 <= 25 {
		t.Fatalf("window descriptor %#x: window log %d, want > 25", z[5], exp+10)
	}
	rc, c, err := Decompress(bytes.NewReader(z))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if c != Zstd {
		t.Fatalf("compression %s", c)
	}
	dg := digest.Canonical.Digester()
	n, err := io.Copy(dg.Hash(), rc)
	if err != nil {
		t.Fatalf("decoding a %d MiB-window frame: %v", h.WindowSize>>20, err)
	}
	if n != int64(len(payload)) || dg.Digest() != digest.FromBytes(payload) {
		t.Fatalf("decoded %d bytes (%s), want %d", n, dg.Digest(), len(payload))
	}
}

// zstdRawFrame is a hand-made zstd frame with the given window descriptor and
// one raw block holding data.
func zstdRawFrame(windowDescriptor byte, data []byte) []byte {
	b := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, windowDescriptor}
	hdr := uint32(1) | uint32(len(data))<<3 // last block, raw
	b = append(b, byte(hdr), byte(hdr>>8), byte(hdr>>16))
	return append(b, data...)
}

func TestZstdWindowLimit(t *testing.T) {
	t.Parallel()
	// Window log 27 (128 MiB, zstd --long=27) decodes; window log 28 is
	// refused, by Decompress when the first frame declares it, by Read when a
	// later frame does.
	for _, tc := range []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"first frame 2^27", zstdRawFrame(17<<3, []byte("hello")), true},
		{"first frame 2^28", zstdRawFrame(18<<3, []byte("hello")), false},
		{"second frame 2^28", append(zstdRawFrame(10<<3, []byte("he")), zstdRawFrame(18<<3, []byte("llo"))...), false},
	} {
		var out []byte
		rc, _, err := Decompress(bytes.NewReader(tc.in))
		if err == nil {
			out, err = io.ReadAll(rc)
			rc.Close()
		}
		if tc.ok && (err != nil || string(out) != "hello") {
			t.Errorf("%s: %q, %v; want hello", tc.name, out, err)
		}
		if !tc.ok && (err == nil || !strings.HasPrefix(err.Error(), "zstd: ") || !strings.Contains(err.Error(), "window larger than the 128 MiB") && !strings.Contains(err.Error(), "more than the 128 MiB")) {
			t.Errorf("%s: error %v, want a zstd error about the window limit", tc.name, err)
		}
	}
}

func TestProbe(t *testing.T) {
	t.Parallel()
	tarball := tarBytes(t, []entry{{name: "a.txt", data: []byte("a")}})
	for _, tc := range []struct {
		name  string
		in    []byte
		c     Compression
		isTar bool
	}{
		{"plain tar", tarball, None, true},
		{"zstd tar", compress(t, Zstd, tarball), Zstd, true},
		{"gzip tar", compress(t, Gzip, tarball), Gzip, true},
		{"empty tar", make([]byte, 1024), None, true},
		{"text", []byte("just some text, not an archive\n"), None, false},
		{"gzip text", compress(t, Gzip, bytes.Repeat([]byte("text "), 200)), Gzip, false},
		{"empty file", nil, None, false},
	} {
		c, isTar, err := Probe(bytes.NewReader(tc.in))
		if err != nil || c != tc.c || isTar != tc.isTar {
			t.Errorf("%s: Probe = %s, %v, %v; want %s, %v", tc.name, c, isTar, err, tc.c, tc.isTar)
		}
	}
}

// oneFileTar is a tar of one empty file as Go's archive/tar writes it in format
// f; for PAX, whose first block heads the extended records, the name is long
// enough to need them.
func oneFileTar(t *testing.T, name string, f tar.Format) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, ModTime: epoch, Format: f}); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// withChecksum returns a copy of b whose first block's checksum is written
// again, its bytes summed as signed or as unsigned bytes.
func withChecksum(b []byte, signed bool) []byte {
	b = bytes.Clone(b)
	blk := b[:blockSize]
	copy(blk[148:156], "        ")
	var sum int64
	for _, c := range blk {
		if signed {
			sum += int64(int8(c))
		} else {
			sum += int64(c)
		}
	}
	copy(blk[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// TestIsTarHeader pins the one tar-header rule (Probe and the classification
// of sources both use it): the ustar magic where a header has it, or a whole
// block with a matching checksum (a V7 header). A corrupt header that still
// has the magic is a tar, so that reading it reports the damage.
func TestIsTarHeader(t *testing.T) {
	t.Parallel()
	ustar := oneFileTar(t, "a.txt", tar.FormatUSTAR)
	pax := oneFileTar(t, strings.Repeat("long/", 60)+"name", tar.FormatPAX)
	if pax[156] != tar.TypeXHeader {
		t.Fatalf("the PAX tar starts with a %q header, want %q", pax[156], tar.TypeXHeader)
	}
	var random [blockSize]byte
	rand.NewChaCha8([32]byte{1}).Read(random[:])
	badSum := bytes.Clone(ustar)
	badSum[0] ^= 0x20 // a byte of the name: the checksum no longer adds up
	noSum := bytes.Clone(ustar)
	copy(noSum[148:156], "        ")
	highByte := bytes.Clone(ustar)
	highByte[0] = 0xe9 // a byte the signed and the unsigned sums count differently
	v7 := bytes.Clone(ustar)
	copy(v7[257:265], make([]byte, 8)) // no magic, no version
	v7 = withChecksum(v7, false)
	for _, tc := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"ustar", ustar, true},
		{"pax", pax, true},
		{"gnu", oneFileTar(t, "a.txt", tar.FormatGNU), true},
		{"signed checksum", withChecksum(highByte, true), true},
		{"ustar, first block only", ustar[:blockSize], true},
		{"random block", random[:], false},
		{"text", bytes.Repeat([]byte("not a tar header\n"), 64), false},
		{"empty", nil, false},
		{"ustar magic, wrong checksum", badSum, true},
		{"ustar magic, blank checksum", noSum, true},
		{"ustar header cut short", ustar[:blockSize-1], true},
		{"ustar magic cut off", ustar[:261], false},
		{"v7 header, no magic", v7, true},
		{"v7 header cut short", v7[:blockSize-1], false},
		{"zero block", make([]byte, 2*blockSize), false},
	} {
		if got := IsTarHeader(tc.b); got != tc.want {
			t.Errorf("%s: IsTarHeader = %v, want %v", tc.name, got, tc.want)
		}
		if tc.want && len(tc.b) > blockSize && !bytes.Equal(tc.b, badSum) && !bytes.Equal(tc.b, noSum) {
			// What the rule accepts, the tar reader reads.
			if _, err := tar.NewReader(bytes.NewReader(tc.b)).Next(); err != nil {
				t.Errorf("%s: archive/tar refuses it: %v", tc.name, err)
			}
		}
	}
	// The V7 header is one the tar reader reads, and Probe still takes the
	// zero blocks of an empty archive for a tar (TestProbe).
	if _, err := tar.NewReader(bytes.NewReader(v7)).Next(); err != nil {
		t.Errorf("v7 header: archive/tar refuses it: %v", err)
	}
}

func BenchmarkSniff(b *testing.B) {
	heads := [][]byte{
		{0x1f, 0x8b, 0x08, 0x00},
		{0x28, 0xb5, 0x2f, 0xfd},
		[]byte("BZh91AY&SY"),
		{0xfd, '7', 'z', 'X', 'Z', 0x00},
		{0x04, 0x22, 0x4d, 0x18},
		append([]byte{0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 1, 2, 3, 4}, 0x28, 0xb5, 0x2f, 0xfd),
		make([]byte, 512),
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		Sniff(heads[i%len(heads)])
	}
}

// BenchmarkDecompress decodes 16 MiB of text that compresses a bit, for each
// compression: MB/s of decompressed bytes; ratio is compressed/decompressed.
func BenchmarkDecompress(b *testing.B) {
	data := compressible(16<<20, 3)
	for _, c := range allCompressions[1:] {
		b.Run(string(c), func(b *testing.B) {
			comp := compress(b, c, data)
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				rc, _, err := Decompress(bytes.NewReader(comp))
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, rc)
				rc.Close()
				if err != nil || n != int64(len(data)) {
					b.Fatalf("%d bytes, %v", n, err)
				}
			}
			b.ReportMetric(float64(len(comp))/float64(len(data)), "ratio")
		})
	}
}

// TestLZMA2Dict: an LZMA2 property byte declares the dictionary the .xz
// format gives it, as ulikunitz/xz's encoder writes it.
func TestLZMA2Dict(t *testing.T) {
	for p, want := range map[byte]int64{0: 4 << 10, 1: 6 << 10, 18: 2 << 20, 22: 8 << 20, 23: 12 << 20, 26: 32 << 20, 28: 64 << 20, 39: 3 << 30, 40: 1<<32 - 1} {
		if got, ok := lzma2Dict(p); !ok || got != want {
			t.Errorf("lzma2Dict(%d) = %d, %v; want %d", p, got, ok, want)
		}
		if p < 40 && lzma.EncodeDictCap(want) != p {
			t.Errorf("ulikunitz/xz encodes a %d-byte dictionary as %d, not %d", want, lzma.EncodeDictCap(want), p)
		}
	}
	if _, ok := lzma2Dict(41); ok {
		t.Error("lzma2Dict(41) is a dictionary; want none")
	}
}

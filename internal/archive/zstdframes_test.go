package archive

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

// zframe is one zstd frame of a test stream: its content and its bytes.
type zframe struct{ content, comp []byte }

var testZstdEnc, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest))

// zframesOf cuts data into frames of size bytes of content, each compressed
// on its own (with its content size and checksum).
func zframesOf(data []byte, size int) []zframe {
	var fs []zframe
	for len(data) > 0 {
		k := min(size, len(data))
		fs = append(fs, zframe{data[:k], testZstdEnc.EncodeAll(data[:k], nil)})
		data = data[k:]
	}
	return fs
}

// streamedZframe is content as a streaming encoder writes it: no content
// size, a window descriptor, blocks as written.
func streamedZframe(t testing.TB, content []byte) zframe {
	t.Helper()
	var b bytes.Buffer
	zw, err := zstd.NewWriter(&b, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	for p := content; len(p) > 0; p = p[min(len(p), 100000):] {
		if _, err := zw.Write(p[:min(len(p), 100000)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return zframe{content, b.Bytes()}
}

func skippableZframe(magic uint32, payload []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, magic)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
	return append(b, payload...)
}

func concatZframes(fs []zframe) []byte {
	var b []byte
	for _, f := range fs {
		b = append(b, f.comp...)
	}
	return b
}

// pzstdZframes lays out frames as pzstd does: each after a skippable frame
// that says its compressed size.
func pzstdZframes(fs []zframe) []byte {
	var b []byte
	for _, f := range fs {
		b = append(b, skippableZframe(pzstdMagic, binary.LittleEndian.AppendUint32(nil, uint32(len(f.comp))))...)
		b = append(b, f.comp...)
	}
	return b
}

// seekTableOf is the seek table of fs, with checksums taken from the frames
// (0 for a frame without one).
func seekTableOf(fs []zframe) []byte {
	var p []byte
	for _, f := range fs {
		var sum uint32
		if f.comp[4]&0x04 != 0 {
			sum = binary.LittleEndian.Uint32(f.comp[len(f.comp)-4:])
		}
		p = binary.LittleEndian.AppendUint32(p, uint32(len(f.comp)))
		p = binary.LittleEndian.AppendUint32(p, uint32(len(f.content)))
		p = binary.LittleEndian.AppendUint32(p, sum)
	}
	p = binary.LittleEndian.AppendUint32(p, uint32(len(fs)))
	p = append(p, seekChecksumFlag)
	p = binary.LittleEndian.AppendUint32(p, seekableMagic)
	return skippableZframe(seekTableMagic, p)
}

func contentOf(fs []zframe) []byte {
	var b []byte
	for _, f := range fs {
		b = append(b, f.content...)
	}
	return b
}

// readZstdFrames decodes b with a zstdFrames of the given workers, reading
// buf bytes at a time (as the read-ahead does), and returns it, closed, to
// say how it went.
func readZstdFrames(b []byte, workers, buf int) ([]byte, *zstdFrames, error) {
	z := newZstdFrames(bytes.NewReader(b), zstdMaxWindow, workers)
	defer z.Close()
	var out bytes.Buffer
	_, err := io.CopyBuffer(&out, struct{ io.Reader }{z}, make([]byte, buf))
	return out.Bytes(), z, err
}

func TestZstdFramesDecode(t *testing.T) {
	data := mixedContent(1<<20+5, 11)
	small := zframesOf(data, 64<<10)
	seekable := seekableBytes(t, data, SeekableOptions{FrameSize: 64 << 10}, 1<<20)

	// Every kind of frame in one stream: small frames with and without a
	// content size, an empty one, one whose content is too large to decode
	// whole (20 MiB of little), one whose compressed bytes are too large to
	// buffer (9 MiB of random bytes), skippable frames, a seek table.
	mixed := []zframe{small[0], streamedZframe(t, data[:300<<10]), {nil, emptyZstdFrame}}
	mixed = append(mixed, zframesOf(bytes.Repeat([]byte("layer "), 20<<20/6), 20<<20)...)
	mixed = append(mixed, small[1])
	mixed = append(mixed, zframesOf(randomLayer(9<<20, 3).data, 9<<20)...)
	mixed = append(mixed, small[2:5]...)
	mixedBytes := concatZframes(mixed[:3])
	mixedBytes = append(mixedBytes, skippableZframe(0x184D2A53, []byte("user data"))...)
	mixedBytes = append(mixedBytes, concatZframes(mixed[3:])...)
	mixedBytes = append(mixedBytes, seekTableOf(mixed)...)

	// A first frame too large to buffer, or that says its content is too
	// large to decode whole: the whole stream is decoded as one.
	big := append(zframesOf(randomLayer(9<<20, 4).data, 9<<20), small...)
	long := append(zframesOf(bytes.Repeat([]byte("layer "), 20<<20/6), 20<<20), small...)

	for _, tc := range []struct {
		name   string
		in     []byte
		want   []byte
		single bool
	}{
		{"concatenated", concatZframes(small), data, false},
		{"pzstd", pzstdZframes(small), data, false},
		{"seekable", seekable, data, false},
		{"seekable by hand", append(concatZframes(small), seekTableOf(small)...), data, false},
		{"mixed", mixedBytes, contentOf(mixed), false},
		{"large first frame", concatZframes(big), contentOf(big), true},
		{"long first frame", concatZframes(long), contentOf(long), true},
		{"one small frame", small[0].comp, small[0].content, false},
		{"skippable only", skippableZframe(0x184D2A5F, []byte("nothing")), nil, false},
	} {
		for _, workers := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, workers), func(t *testing.T) {
				for _, buf := range []int{1 << 20, 1000} {
					got, z, err := readZstdFrames(tc.in, workers, buf)
					if err != nil || !bytes.Equal(got, tc.want) {
						t.Fatalf("reads of %d: %d of %d bytes, %v", buf, len(got), len(tc.want), err)
					}
					if (z.single != nil) != tc.single {
						t.Fatalf("decoded as one stream: %v, want %v", z.single != nil, tc.single)
					}
				}
				// Through Decompress, and as klauspost's reader does.
				rc, _, err := decompressWith(bytes.NewReader(tc.in), zstdMaxWindow, workers)
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(rc)
				rc.Close()
				if err != nil || !bytes.Equal(got, tc.want) {
					t.Fatalf("Decompress: %d of %d bytes, %v", len(got), len(tc.want), err)
				}
				zr, _ := zstd.NewReader(bytes.NewReader(tc.in), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(zstdMaxWindow))
				defer zr.Close()
				if got, err := io.ReadAll(zr); err != nil || !bytes.Equal(got, tc.want) {
					t.Fatalf("the test is wrong: klauspost's reader reads %d of %d bytes, %v", len(got), len(tc.want), err)
				}
			})
		}
	}
}

// TestZstdFramesPzstd decodes what the pzstd CLI writes, frame by frame, its
// size frames checked.
func TestZstdFramesPzstd(t *testing.T) {
	pzstd, err := exec.LookPath("pzstd")
	if err != nil {
		testenv.Missing(t, "zstd", "pzstd (of the zstd CLI) is not on PATH (make deps installs it)")
	}
	data := mixedContent(12<<20, 12)
	cmd := exec.Command(pzstd, "-q", "-p", "2", "-c")
	cmd.Stdin = bytes.NewReader(data)
	z, err := cmd.Output()
	if err != nil {
		t.Fatalf("pzstd: %v", err)
	}
	got, zf, err := readZstdFrames(z, 2, 1<<20)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("%d of %d bytes, %v", len(got), len(data), err)
	}
	if zf.single != nil || zf.frames < 2 || !zf.started {
		t.Fatalf("pzstd's %d frames not decoded frame by frame (one stream: %v)", zf.frames, zf.single != nil)
	}
}

// TestZstdFramesCorrupt: a broken frame names its offset, a cut-off stream
// is an unexpected EOF, a size frame or seek table that lies is an error
// naming the frame and both sizes. Every error comes after the bytes of the
// frames before.
func TestZstdFramesCorrupt(t *testing.T) {
	data := mixedContent(512<<10, 13)
	fs := zframesOf(data, 64<<10)
	offs := make([]int, len(fs)+1)
	for i, f := range fs {
		offs[i+1] = offs[i] + len(f.comp)
	}
	plain := concatZframes(fs)
	withTable := func(edit func(p []byte) []byte) []byte {
		t := seekTableOf(fs)
		return append(concatZframes(fs), edit(t)...)
	}
	flipped := bytes.Clone(plain)
	flipped[offs[4]-10] ^= 0x40

	pz := pzstdZframes(fs)
	// The size frame of frame 3 says 4 bytes more.
	pzOff := 0
	for i := range 3 {
		pzOff += 12 + len(fs[i].comp)
	}
	binary.LittleEndian.PutUint32(pz[pzOff+8:], uint32(len(fs[3].comp)+4))

	entry := func(i int) int { return 8 + i*seekEntrySizeXXH }
	hugeWindow := append(concatZframes(fs[:3]), zstdRawFrame(18<<3, []byte("hello"))...)
	reserved := append(concatZframes(fs[:3]), 0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x05, 0x07, 0x00, 0x00)

	tableOff := len(plain)
	for _, tc := range []struct {
		name   string
		in     []byte
		want   string
		frames int   // frames whose content comes out before the error
		is     error // the error wraps it
	}{
		{"flipped byte", flipped, fmt.Sprintf("zstd: frame at offset %d: ", offs[3]), 3, nil},
		{"cut in a frame", plain[:offs[5]+100], "zstd: unexpected EOF", 5, io.ErrUnexpectedEOF},
		{"cut in a block header", plain[:offs[5]+7], "zstd: unexpected EOF", 5, io.ErrUnexpectedEOF},
		{"cut in a magic", plain[:offs[5]+2], "zstd: unexpected EOF", 5, io.ErrUnexpectedEOF},
		{"cut in the seek table", withTable(func(p []byte) []byte { return p[:len(p)-3] }), "zstd: unexpected EOF", len(fs), io.ErrUnexpectedEOF},
		{"garbage after", append(bytes.Clone(plain), "garbage"...), fmt.Sprintf("zstd: frame at offset %d: invalid input: magic number mismatch", len(plain)), len(fs), zstd.ErrMagicMismatch},
		{"pzstd size frame lies", pz, fmt.Sprintf("zstd: the pzstd size frame at offset %d says frame 3 (at offset %d) is %d bytes compressed, it is %d", pzOff, pzOff+12, len(fs[3].comp)+4, len(fs[3].comp)), 4, nil},
		{"seek table lies about a compressed size", withTable(func(p []byte) []byte {
			binary.LittleEndian.PutUint32(p[entry(3):], uint32(len(fs[3].comp)-4))
			return p
		}), fmt.Sprintf("zstd: the seek table says frame 3 (at offset %d) is %d bytes compressed, it is %d", offs[3], len(fs[3].comp)-4, len(fs[3].comp)), len(fs), nil},
		{"seek table lies about a content size", withTable(func(p []byte) []byte {
			binary.LittleEndian.PutUint32(p[entry(2)+4:], 4096)
			return p
		}), fmt.Sprintf("zstd: the seek table says frame 2 (at offset %d) decompresses to 4096 bytes, it is %d", offs[2], 64<<10), len(fs), nil},
		{"seek table lies about a checksum", withTable(func(p []byte) []byte {
			p[entry(5)+8] ^= 1
			return p
		}), "zstd: the seek table says frame 5", len(fs), nil},
		{"seek table lies about the frame count", append(bytes.Clone(plain), seekTableOf(fs[:len(fs)-1])...),
			fmt.Sprintf("zstd: the seek table at offset %d says %d frames, there are %d", tableOff, len(fs)-1, len(fs)), len(fs), nil},
		{"seek table footer disagrees with it", withTable(func(p []byte) []byte {
			binary.LittleEndian.PutUint32(p[len(p)-seekFooterSize:], uint32(len(fs)+1))
			return p
		}), fmt.Sprintf("zstd: the seek table at offset %d: its footer says %d frames", tableOff, len(fs)+1), len(fs), nil},
		{"window over the limit", hugeWindow, fmt.Sprintf("zstd: the frame at offset %d declares a 256 MiB window, more than the 128 MiB holdfast decodes", offs[3]), 3, nil},
		{"reserved block type", reserved, fmt.Sprintf("zstd: frame at offset %d: invalid input: reserved block type", offs[3]), 3, zstd.ErrReservedBlockType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, workers := range []int{1, 3} {
				rc, _, err := decompressWith(bytes.NewReader(tc.in), zstdMaxWindow, workers)
				if err != nil {
					t.Fatal(err)
				}
				var got bytes.Buffer
				_, err = io.CopyBuffer(&got, rc, make([]byte, 1<<20))
				if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
					t.Fatalf("%d workers: error %v, want %q", workers, err, tc.want)
				}
				if tc.is != nil && !errors.Is(err, tc.is) {
					t.Fatalf("%d workers: error %v does not wrap %v", workers, err, tc.is)
				}
				if want := contentOf(fs[:tc.frames]); !bytes.Equal(got.Bytes(), want) {
					t.Fatalf("%d workers: %d bytes before the error, want %d", workers, got.Len(), len(want))
				}
				if _, again := rc.Read(make([]byte, 10)); again == nil || again.Error() != err.Error() {
					t.Fatalf("%d workers: read after the error: %v", workers, again)
				}
				rc.Close()
			}
		})
	}

	// Cut at a frame boundary, a stream of frames is a shorter stream: only
	// what holds it (the tar walk, TestZstdFramesWalk) can tell.
	got, _, err := readZstdFrames(plain[:offs[5]], 2, 1<<20)
	if err != nil || !bytes.Equal(got, data[:5*64<<10]) {
		t.Fatalf("cut after frame 5: %d bytes, %v", len(got), err)
	}
}

// unsizedZframe is a frame that declares no content size (a 1 MiB window)
// and holds rle blocks of 128 KiB of zeros.
func unsizedZframe(rle int) []byte {
	return appendRLEBlocks([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 10 << 3}, rle)
}

// hostileZframe is a frame that declares fcs bytes of content (not single
// segment, a 1 MiB window) and holds rle blocks of 128 KiB of zeros.
func hostileZframe(fcs uint64, rle int) []byte {
	b := []byte{0x28, 0xb5, 0x2f, 0xfd, 0xc0, 10 << 3}
	return appendRLEBlocks(binary.LittleEndian.AppendUint64(b, fcs), rle)
}

// appendRLEBlocks appends rle blocks of 128 KiB of zeros, the last marked
// last, to a frame header.
func appendRLEBlocks(b []byte, rle int) []byte {
	for i := range rle {
		h := uint32(zstdMaxBlock)<<3 | 1<<1
		if i == rle-1 {
			h |= 1
		}
		b = append(b, byte(h), byte(h>>8), byte(h>>16), 0)
	}
	return b
}

// TestZstdFramesMemory: whatever frames declare, the decoder holds a bounded
// amount of memory: a frame that claims a terabyte is decoded as a stream
// (and fails where its content ends), frames of 16 MiB each are decoded
// into buffers used again.
func TestZstdFramesMemory(t *testing.T) {
	small := zframesOf(mixedContent(256<<10, 14), 64<<10)
	for _, tc := range []struct {
		name  string
		in    []byte
		n     int64 // the content (before the error, at most)
		err   string
		bound uint64 // allocated bytes at most
	}{
		{"a terabyte declared, first", hostileZframe(1<<40, 200), 200 * zstdMaxBlock, "frame size does not match", 32 << 20},
		{"a terabyte declared, later", append(concatZframes(small), hostileZframe(1<<40, 200)...), 256<<10 + 200*zstdMaxBlock, "frame size does not match", 32 << 20},
		{"frames of 16 MiB", bytes.Repeat(hostileZframe(16<<20, 128), 40), 40 * 16 << 20, "", (4+2)*zstdFrameDecCap + 8<<20},
		// Its blocks may hold more than a frame decoded whole may: it is
		// streamed, its memory its window's.
		{"a frame of 64 MiB, its size not declared", append(concatZframes(small), unsizedZframe(512)...), 256<<10 + 512*zstdMaxBlock, "", 32 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			rc, _, err := decompressWith(bytes.NewReader(tc.in), zstdMaxWindow, 4)
			if err != nil {
				t.Fatal(err)
			}
			n, err := io.CopyBuffer(io.Discard, rc, make([]byte, 1<<20))
			rc.Close()
			runtime.ReadMemStats(&after)
			if tc.err == "" && (err != nil || n != tc.n) || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || n > tc.n) {
				t.Fatalf("%d bytes, %v; want %d bytes and an error saying %q", n, err, tc.n, tc.err)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("allocated %d MiB", alloc>>20)
			if alloc > tc.bound {
				t.Fatalf("allocated %d MiB decoding, more than %d MiB", alloc>>20, tc.bound>>20)
			}
		})
	}
}

// frameGoroutines are the stacks of the frame decoder's goroutines still
// there after Close. A goroutine that has called wg.Done may not have
// returned yet when Close does: they are looked for again, for up to 5
// seconds, until there are none; one that is blocked stays.
func frameGoroutines() []string {
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var left []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "(*zstdFrames)") {
				left = append(left, g)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(time.Millisecond)
	}
}

// TestZstdFramesClose: a reader that stops early, anywhere, leaves no
// goroutine behind once Close returns.
func TestZstdFramesClose(t *testing.T) {
	data := mixedContent(2<<20, 15)
	small := zframesOf(data, 64<<10)
	// A frame too large to buffer, fed through a pipe, among small ones.
	withBig := append(append(small[:4:4], zframesOf(randomLayer(10<<20, 5).data, 10<<20)...), small[4:]...)
	for _, tc := range []struct {
		name string
		in   []byte
		read int
	}{
		{"not read", concatZframes(small), 0},
		{"one read", concatZframes(small), 1},
		{"mid stream", concatZframes(small), 700 << 10},
		{"read through", concatZframes(small), 4 << 20},
		{"in a piped frame", concatZframes(withBig), 5 << 20},
		{"before a piped frame", concatZframes(withBig), 300 << 10},
		{"after an error", append(concatZframes(small), "junk"...), 4 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			z := newZstdFrames(bytes.NewReader(tc.in), zstdMaxWindow, 3)
			buf := make([]byte, 64<<10)
			for n := 0; n < tc.read; {
				k, err := z.Read(buf[:min(len(buf), tc.read-n)])
				n += k
				if err != nil {
					break
				}
			}
			z.Close()
			if left := frameGoroutines(); len(left) > 0 {
				t.Fatalf("goroutines left after Close:\n%s", strings.Join(left, "\n\n"))
			}
			deadline := time.Now().Add(5 * time.Second)
			for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if n := runtime.NumGoroutine(); n > before {
				t.Fatalf("%d goroutines after Close, %d before", n, before)
			}
			if _, err := z.Read(buf); err == nil {
				t.Fatal("read after Close: no error")
			}
		})
	}
}

// TestZstdFramesWalk: through a walk, a seek table that lies fails the walk
// (it is read before the walk returns anything), and so does a stream of
// frames cut at a frame boundary; a good one walks.
func TestZstdFramesWalk(t *testing.T) {
	im := imageWith(t, "amd64", randomLayer(700<<10, 21), randomLayer(300<<10, 22))
	tarb := tarBytes(t, ociEntries("", indexJSON(t, withAnnotations(im.manifest.desc(), annotationContainerdName, "example.com/a:1")), im.blobs()...))
	fs := zframesOf(tarb, 64<<10)
	good := append(concatZframes(fs), seekTableOf(fs)...)
	lying := append(concatZframes(fs), seekTableOf(fs)...)
	binary.LittleEndian.PutUint32(lying[len(concatZframes(fs))+8+7*seekEntrySizeXXH:], 1234)

	res, err := walk(t.Context(), bytes.NewReader(good), newMemStore(), WalkOptions{}, smallLimits())
	if err != nil || len(res.Images) != 1 || res.Compression != Zstd || res.BytesRead != int64(len(good)) {
		t.Fatalf("good stream: %v, %v", res, err)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"seek table lies", lying, "zstd: the seek table says frame 7"},
		{"cut at a frame boundary", concatZframes(fs[:len(fs)-1]), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := walk(t.Context(), struct{ io.Reader }{bytes.NewReader(tc.in)}, newMemStore(), WalkOptions{}, smallLimits())
			if err == nil || res != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("result %v, error %v; want an error saying %q", res, err, tc.want)
			}
		})
	}
}

// TestZstdFramesPipedCorrupt: a frame too large to buffer, decoded as the
// scanner walks it, fails as a buffered one does: a broken one names its
// offset, one cut off is an unexpected EOF, after the frames before it.
func TestZstdFramesPipedCorrupt(t *testing.T) {
	small := zframesOf(mixedContent(256<<10, 16), 64<<10)
	big := zframesOf(randomLayer(10<<20, 6).data, 10<<20)[0]
	in := append(concatZframes(small), big.comp...)
	bigOff := len(concatZframes(small))
	flipped := bytes.Clone(in)
	flipped[len(flipped)-100] ^= 0x10
	for _, tc := range []struct {
		name, want string
		in         []byte
		is         error
	}{
		{"flipped byte", fmt.Sprintf("zstd: frame at offset %d: ", bigOff), flipped, nil},
		{"cut off", "zstd: unexpected EOF", in[:bigOff+9<<20], io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, z, err := readZstdFrames(tc.in, 2, 1<<20)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if z.single != nil || !bytes.HasPrefix(got, contentOf(small)) || !bytes.HasPrefix(big.content, got[len(contentOf(small)):]) {
				t.Fatalf("%d bytes before the error, not the frames before and a part of the broken one", len(got))
			}
		})
	}
}

// TestZstdFramesProbe: reading the start of a stream of frames decodes its
// first frame only, in the reader's goroutine.
func TestZstdFramesProbe(t *testing.T) {
	fs := zframesOf(mixedContent(1<<20, 17), 64<<10)
	z := newZstdFrames(bytes.NewReader(concatZframes(fs)), zstdMaxWindow, 2)
	defer z.Close()
	blk := make([]byte, blockSize)
	if _, err := io.ReadFull(z, blk); err != nil || !bytes.Equal(blk, fs[0].content[:blockSize]) {
		t.Fatalf("first block: %v", err)
	}
	if z.started || z.frames != 1 {
		t.Fatalf("reading a block scanned %d frames (pipeline started: %v)", z.frames, z.started)
	}
	c, isTar, err := Probe(bytes.NewReader(concatZframes(fs)))
	if err != nil || c != Zstd || isTar {
		t.Fatalf("Probe: %s, tar %v, %v", c, isTar, err)
	}
}

// TestZstdFramesLargeSeekTable: of a seek table too large to keep, the
// footer is read, and the number of frames it says checked.
func TestZstdFramesLargeSeekTable(t *testing.T) {
	fs := zframesOf(mixedContent(256<<10, 18), 64<<10)
	table := func(count uint32) []byte {
		p := make([]byte, zstdSeekTableCap+seekEntrySizeXXH)
		foot := p[len(p)-seekFooterSize:]
		binary.LittleEndian.PutUint32(foot, count)
		foot[4] = seekChecksumFlag
		binary.LittleEndian.PutUint32(foot[5:], seekableMagic)
		return append(concatZframes(fs), skippableZframe(seekTableMagic, p)...)
	}
	if got, _, err := readZstdFrames(table(uint32(len(fs))), 2, 1<<20); err != nil || !bytes.Equal(got, contentOf(fs)) {
		t.Fatalf("a large table that says %d frames: %d bytes, %v", len(fs), len(got), err)
	}
	want := fmt.Sprintf("zstd: the seek table at offset %d says %d frames, there are %d", len(concatZframes(fs)), len(fs)+1, len(fs))
	if _, _, err := readZstdFrames(table(uint32(len(fs)+1)), 2, 1<<20); err == nil || err.Error() != want {
		t.Fatalf("a large table that lies: %v, want %s", err, want)
	}
}

// TestZstdFramesLend: a frame decoded whole is lent as it is, and its
// buffer keeps its bytes until it is released, however many frames are
// decoded meanwhile; what cannot be lent (a frame streamed in order, a
// stream decoded as one) is read. The seek table is still checked, and a
// lying one still fails.
func TestZstdFramesLend(t *testing.T) {
	data := mixedContent(3<<20+7, 19)
	small := zframesOf(data, 64<<10)
	mixed := append(append(small[:6:6], zframesOf(randomLayer(9<<20, 6).data, 9<<20)...), small[6:]...)
	lying := append(concatZframes(small), seekTableOf(small)...)
	binary.LittleEndian.PutUint32(lying[len(concatZframes(small))+8+4:], 1) // frame 0's content size
	for _, tc := range []struct {
		name     string
		in       []byte
		want     []byte
		minLent  int // frames lent at least
		err      string
		onlyRead bool // nothing may be lent
	}{
		{name: "seekable", in: seekableBytes(t, data, SeekableOptions{FrameSize: 64 << 10}, 1<<20), want: data, minLent: len(small)},
		{name: "pzstd", in: pzstdZframes(small), want: data, minLent: len(small)},
		// The read that finds the streamed frame's end goes on into the
		// next frame: that one is read, not lent.
		{name: "a streamed frame among them", in: concatZframes(mixed), want: contentOf(mixed), minLent: len(small) - 1},
		{name: "one stream", in: concatZframes(append(zframesOf(randomLayer(9<<20, 7).data, 9<<20), small...)), want: append(randomLayer(9<<20, 7).data, data...), onlyRead: true},
		{name: "a lying seek table", in: lying, want: data, minLent: len(small), err: "zstd: the seek table says frame 0 (at offset 0) decompresses to 1 bytes"},
	} {
		for _, workers := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, workers), func(t *testing.T) {
				z := newZstdFrames(bytes.NewReader(tc.in), zstdMaxWindow, workers)
				defer z.Close()
				type held struct {
					off     int
					b       []byte
					release func()
				}
				var got []byte
				var hold []held
				check := func(h held) {
					if !bytes.Equal(h.b, tc.want[h.off:h.off+len(h.b)]) {
						t.Fatalf("the frame lent at %d changed before its release", h.off)
					}
				}
				released := make(chan struct{}, 1)
				lent, buf := 0, make([]byte, 100_000)
				var err error
				for {
					b, release, ok := z.lend()
					if !ok {
						var k int
						k, err = z.Read(buf)
						got = append(got, buf[:k]...)
						if err != nil {
							break
						}
						continue
					}
					lent++
					hold = append(hold, held{len(got), b, release})
					got = append(got, b...)
					// Keep all units but one lent: the decoder goes on
					// with that one. Released from another goroutine.
					if len(hold) > workers {
						h := hold[0]
						hold = hold[1:]
						check(h)
						go func() { h.release(); released <- struct{}{} }()
						<-released
					}
				}
				for _, h := range hold {
					check(h)
					h.release()
				}
				if tc.err != "" {
					if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
						t.Fatalf("error %v, want %q", err, tc.err)
					}
					return
				}
				if err != io.EOF || !bytes.Equal(got, tc.want) {
					t.Fatalf("%d of %d bytes, %v", len(got), len(tc.want), err)
				}
				if tc.onlyRead && lent > 0 || !tc.onlyRead && lent < tc.minLent {
					t.Fatalf("%d frames lent, want %d or more (none when decoded as one stream)", lent, tc.minLent)
				}
			})
		}
	}
}

// TestZstdFramesLendThroughReadAhead: the read-ahead passes lent frames on
// as they are; a walk gets every byte, and a reader that stops reading and
// closes the read-ahead with every unit lent does not hang.
func TestZstdFramesLendThroughReadAhead(t *testing.T) {
	data := mixedContent(4<<20, 20)
	in := concatZframes(zframesOf(data, 64<<10))
	for _, workers := range []int{1, 2, 4} {
		rc, _, err := decompressWith(bytes.NewReader(in), zstdMaxWindow, workers)
		if err != nil {
			t.Fatal(err)
		}
		a := newAheadReader(rc)
		got, err := io.ReadAll(struct{ io.Reader }{a})
		a.Close()
		rc.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%d workers: %d of %d bytes, %v", workers, len(got), len(data), err)
		}

		rc, _, err = decompressWith(bytes.NewReader(in), zstdMaxWindow, workers)
		if err != nil {
			t.Fatal(err)
		}
		a = newAheadReader(rc)
		if _, err := io.ReadFull(a, make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
		// Let the read-ahead take every unit there is.
		deadline := time.Now().Add(5 * time.Second)
		for len(a.full) < min(aheadBlocks, workers+1) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		closed := make(chan struct{})
		go func() { a.Close(); rc.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d workers: Close hung with the read-ahead holding lent frames", workers)
		}
		if left := frameGoroutines(); len(left) > 0 {
			t.Fatalf("goroutines left after Close:\n%s", strings.Join(left, "\n\n"))
		}
	}
}

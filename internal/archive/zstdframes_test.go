package archive

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/holdfast-project/holdfast/internal/archive/zstdframe"
	"github.com/holdfast-project/holdfast/internal/fixture"
)

// frameDecCap is the most content zstdframe decodes a frame whole into.
const frameDecCap = 16 << 20

// readZstdFrames decodes b with a zstdframe.Reader of the given workers,
// reading buf bytes at a time (as the read-ahead does), and returns it,
// closed, to say how it went.
func readZstdFrames(b []byte, workers, buf int) ([]byte, *zstdframe.Reader, error) {
	z := zstdframe.NewReader(bytes.NewReader(b), zstdMaxWindow, workers)
	defer z.Close()
	var out bytes.Buffer
	_, err := io.CopyBuffer(&out, struct{ io.Reader }{z}, make([]byte, buf))
	return out.Bytes(), z, err
}

// TestZstdFramesCorrupt: a broken frame names its offset, a cut-off stream
// is an unexpected EOF, a size frame or seek table that lies is an error
// naming the frame and both sizes. Every error comes after the bytes of the
// frames before.
func TestZstdFramesCorrupt(t *testing.T) {
	data := fixture.MixedContent(512<<10, 13)
	fs := fixture.ZstdFramesOf(data, 64<<10)
	offs := make([]int, len(fs)+1)
	for i, f := range fs {
		offs[i+1] = offs[i] + len(f.Comp)
	}
	plain := fixture.ConcatZstd(fs)
	withTable := func(edit func(p []byte) []byte) []byte {
		t := fixture.SeekTableOf(fs)
		return append(fixture.ConcatZstd(fs), edit(t)...)
	}
	flipped := bytes.Clone(plain)
	flipped[offs[4]-10] ^= 0x40

	pz := fixture.PzstdFrames(fs)
	// The size frame of frame 3 says 4 bytes more.
	pzOff := 0
	for i := range 3 {
		pzOff += 12 + len(fs[i].Comp)
	}
	binary.LittleEndian.PutUint32(pz[pzOff+8:], uint32(len(fs[3].Comp)+4))

	entry := func(i int) int { return 8 + i*fixture.SeekEntrySize }
	hugeWindow := append(fixture.ConcatZstd(fs[:3]), zstdRawFrame(18<<3, []byte("hello"))...)
	reserved := append(fixture.ConcatZstd(fs[:3]), 0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x05, 0x07, 0x00, 0x00)

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
		{"pzstd size frame lies", pz, fmt.Sprintf("zstd: the pzstd size frame at offset %d says frame 3 (at offset %d) is %d bytes compressed, it is %d", pzOff, pzOff+12, len(fs[3].Comp)+4, len(fs[3].Comp)), 4, nil},
		{"seek table lies about a compressed size", withTable(func(p []byte) []byte {
			binary.LittleEndian.PutUint32(p[entry(3):], uint32(len(fs[3].Comp)-4))
			return p
		}), fmt.Sprintf("zstd: the seek table says frame 3 (at offset %d) is %d bytes compressed, it is %d", offs[3], len(fs[3].Comp)-4, len(fs[3].Comp)), len(fs), nil},
		{"seek table lies about a content size", withTable(func(p []byte) []byte {
			binary.LittleEndian.PutUint32(p[entry(2)+4:], 4096)
			return p
		}), fmt.Sprintf("zstd: the seek table says frame 2 (at offset %d) decompresses to 4096 bytes, it is %d", offs[2], 64<<10), len(fs), nil},
		{"seek table lies about a checksum", withTable(func(p []byte) []byte {
			p[entry(5)+8] ^= 1
			return p
		}), "zstd: the seek table says frame 5", len(fs), nil},
		{"seek table lies about the frame count", append(bytes.Clone(plain), fixture.SeekTableOf(fs[:len(fs)-1])...),
			fmt.Sprintf("zstd: the seek table at offset %d says %d frames, there are %d", tableOff, len(fs)-1, len(fs)), len(fs), nil},
		{"seek table footer disagrees with it", withTable(func(p []byte) []byte {
			binary.LittleEndian.PutUint32(p[len(p)-fixture.SeekFooterSize:], uint32(len(fs)+1))
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
				if want := fixture.ContentOf(fs[:tc.frames]); !bytes.Equal(got.Bytes(), want) {
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

// TestZstdFramesMemory: whatever frames declare, the decoder holds a bounded
// amount of memory: a frame that claims a terabyte is decoded as a stream
// (and fails where its content ends), frames of 16 MiB each are decoded
// into buffers used again.
func TestZstdFramesMemory(t *testing.T) {
	small := fixture.ZstdFramesOf(fixture.MixedContent(256<<10, 14), 64<<10)
	for _, tc := range []struct {
		name  string
		in    []byte
		n     int64 // the content (before the error, at most)
		err   string
		bound uint64 // allocated bytes at most
	}{
		{"a terabyte declared, first", fixture.HostileZstdFrame(1<<40, 200), 200 * fixture.ZstdMaxBlock, "frame size does not match", 32 << 20},
		{"a terabyte declared, later", append(fixture.ConcatZstd(small), fixture.HostileZstdFrame(1<<40, 200)...), 256<<10 + 200*fixture.ZstdMaxBlock, "frame size does not match", 32 << 20},
		{"frames of 16 MiB", bytes.Repeat(fixture.HostileZstdFrame(16<<20, 128), 40), 40 * 16 << 20, "", (4+2)*frameDecCap + 8<<20},
		// Its blocks may hold more than a frame decoded whole may: it is
		// streamed, its memory its window's.
		{"a frame of 64 MiB, its size not declared", append(fixture.ConcatZstd(small), fixture.UnsizedZstdFrame(512)...), 256<<10 + 512*fixture.ZstdMaxBlock, "", 32 << 20},
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

// TestZstdFramesWalk: through a walk, a seek table that lies fails the walk
// (it is read before the walk returns anything), and so does a stream of
// frames cut at a frame boundary; a good one walks.
func TestZstdFramesWalk(t *testing.T) {
	im := imageWith(t, "amd64", randomLayer(700<<10, 21), randomLayer(300<<10, 22))
	tarb := tarBytes(t, ociEntries("", indexJSON(t, withAnnotations(im.manifest.desc(), annotationContainerdName, "example.com/a:1")), im.blobs()...))
	fs := fixture.ZstdFramesOf(tarb, 64<<10)
	good := append(fixture.ConcatZstd(fs), fixture.SeekTableOf(fs)...)
	lying := append(fixture.ConcatZstd(fs), fixture.SeekTableOf(fs)...)
	binary.LittleEndian.PutUint32(lying[len(fixture.ConcatZstd(fs))+8+7*fixture.SeekEntrySize:], 1234)

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
		{"cut at a frame boundary", fixture.ConcatZstd(fs[:len(fs)-1]), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := walk(t.Context(), struct{ io.Reader }{bytes.NewReader(tc.in)}, newMemStore(), WalkOptions{}, smallLimits())
			if err == nil || res != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("result %v, error %v; want an error saying %q", res, err, tc.want)
			}
		})
	}
}

// TestZstdFramesProbe: Probe tells a stream of frames is zstd, and not a
// tar, from its first frame.
func TestZstdFramesProbe(t *testing.T) {
	fs := fixture.ZstdFramesOf(fixture.MixedContent(1<<20, 17), 64<<10)
	c, isTar, err := Probe(bytes.NewReader(fixture.ConcatZstd(fs)))
	if err != nil || c != Zstd || isTar {
		t.Fatalf("Probe: %s, tar %v, %v", c, isTar, err)
	}
}

// TestZstdFramesLendThroughReadAhead: the read-ahead passes lent frames on
// as they are; a walk gets every byte, and a reader that stops reading and
// closes the read-ahead with every unit lent does not hang.
func TestZstdFramesLendThroughReadAhead(t *testing.T) {
	data := fixture.MixedContent(4<<20, 20)
	in := fixture.ConcatZstd(fixture.ZstdFramesOf(data, 64<<10))
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
		if left := fixture.FrameGoroutines("(*zstdframe.Reader)"); len(left) > 0 {
			t.Fatalf("goroutines left after Close:\n%s", strings.Join(left, "\n\n"))
		}
	}
}

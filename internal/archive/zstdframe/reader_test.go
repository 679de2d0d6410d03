package zstdframe

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

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// maxWindow is the window limit archive decodes with.
const maxWindow = 128 << 20

// readZstdFrames decodes b with a Reader of the given workers, reading
// buf bytes at a time (as the read-ahead does), and returns it, closed, to
// say how it went.
func readZstdFrames(b []byte, workers, buf int) ([]byte, *Reader, error) {
	z := NewReader(bytes.NewReader(b), maxWindow, workers)
	defer z.Close()
	var out bytes.Buffer
	_, err := io.CopyBuffer(&out, struct{ io.Reader }{z}, make([]byte, buf))
	return out.Bytes(), z, err
}

func TestZstdFramesDecode(t *testing.T) {
	data := fixture.MixedContent(1<<20+5, 11)
	small := fixture.ZstdFramesOf(data, 64<<10)
	seekable := seekableBytes(t, data, Options{FrameSize: 64 << 10}, 1<<20)

	// Every kind of frame in one stream: small frames with and without a
	// content size, an empty one, one whose content is too large to decode
	// whole (20 MiB of little), one whose compressed bytes are too large to
	// buffer (9 MiB of random bytes), skippable frames, a seek table.
	mixed := []fixture.ZstdFrame{small[0], fixture.StreamedZstdFrame(data[:300<<10]), {Comp: emptyFrame}}
	mixed = append(mixed, fixture.ZstdFramesOf(bytes.Repeat([]byte("layer "), 20<<20/6), 20<<20)...)
	mixed = append(mixed, small[1])
	mixed = append(mixed, fixture.ZstdFramesOf(fixture.RandomBytes(9<<20, 3), 9<<20)...)
	mixed = append(mixed, small[2:5]...)
	mixedBytes := fixture.ConcatZstd(mixed[:3])
	mixedBytes = append(mixedBytes, fixture.SkippableFrame(0x184D2A53, []byte("user data"))...)
	mixedBytes = append(mixedBytes, fixture.ConcatZstd(mixed[3:])...)
	mixedBytes = append(mixedBytes, fixture.SeekTableOf(mixed)...)

	// A first frame too large to buffer, or that says its content is too
	// large to decode whole: the whole stream is decoded as one.
	big := append(fixture.ZstdFramesOf(fixture.RandomBytes(9<<20, 4), 9<<20), small...)
	long := append(fixture.ZstdFramesOf(bytes.Repeat([]byte("layer "), 20<<20/6), 20<<20), small...)

	for _, tc := range []struct {
		name   string
		in     []byte
		want   []byte
		single bool
	}{
		{"concatenated", fixture.ConcatZstd(small), data, false},
		{"pzstd", fixture.PzstdFrames(small), data, false},
		{"seekable", seekable, data, false},
		{"seekable by hand", append(fixture.ConcatZstd(small), fixture.SeekTableOf(small)...), data, false},
		{"mixed", mixedBytes, fixture.ContentOf(mixed), false},
		{"large first frame", fixture.ConcatZstd(big), fixture.ContentOf(big), true},
		{"long first frame", fixture.ConcatZstd(long), fixture.ContentOf(long), true},
		{"one small frame", small[0].Comp, small[0].Content, false},
		{"skippable only", fixture.SkippableFrame(0x184D2A5F, []byte("nothing")), nil, false},
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
				// Read whole, and as klauspost's reader does.
				rc := NewReader(bytes.NewReader(tc.in), maxWindow, workers)
				got, err := io.ReadAll(rc)
				rc.Close()
				if err != nil || !bytes.Equal(got, tc.want) {
					t.Fatalf("read whole: %d of %d bytes, %v", len(got), len(tc.want), err)
				}
				zr, _ := zstd.NewReader(bytes.NewReader(tc.in), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxWindow))
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
	data := fixture.MixedContent(12<<20, 12)
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

// TestZstdFramesClose: a reader that stops early, anywhere, leaves no
// goroutine behind once Close returns.
func TestZstdFramesClose(t *testing.T) {
	data := fixture.MixedContent(2<<20, 15)
	small := fixture.ZstdFramesOf(data, 64<<10)
	// A frame too large to buffer, fed through a pipe, among small ones.
	withBig := append(append(small[:4:4], fixture.ZstdFramesOf(fixture.RandomBytes(10<<20, 5), 10<<20)...), small[4:]...)
	for _, tc := range []struct {
		name string
		in   []byte
		read int
	}{
		{"not read", fixture.ConcatZstd(small), 0},
		{"one read", fixture.ConcatZstd(small), 1},
		{"mid stream", fixture.ConcatZstd(small), 700 << 10},
		{"read through", fixture.ConcatZstd(small), 4 << 20},
		{"in a piped frame", fixture.ConcatZstd(withBig), 5 << 20},
		{"before a piped frame", fixture.ConcatZstd(withBig), 300 << 10},
		{"after an error", append(fixture.ConcatZstd(small), "junk"...), 4 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			z := NewReader(bytes.NewReader(tc.in), maxWindow, 3)
			buf := make([]byte, 64<<10)
			for n := 0; n < tc.read; {
				k, err := z.Read(buf[:min(len(buf), tc.read-n)])
				n += k
				if err != nil {
					break
				}
			}
			z.Close()
			if left := fixture.FrameGoroutines("(*Reader)"); len(left) > 0 {
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

// TestZstdFramesPipedCorrupt: a frame too large to buffer, decoded as the
// scanner walks it, fails as a buffered one does: a broken one names its
// offset, one cut off is an unexpected EOF, after the frames before it.
func TestZstdFramesPipedCorrupt(t *testing.T) {
	small := fixture.ZstdFramesOf(fixture.MixedContent(256<<10, 16), 64<<10)
	big := fixture.ZstdFramesOf(fixture.RandomBytes(10<<20, 6), 10<<20)[0]
	in := append(fixture.ConcatZstd(small), big.Comp...)
	bigOff := len(fixture.ConcatZstd(small))
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
			if z.single != nil || !bytes.HasPrefix(got, fixture.ContentOf(small)) || !bytes.HasPrefix(big.Content, got[len(fixture.ContentOf(small)):]) {
				t.Fatalf("%d bytes before the error, not the frames before and a part of the broken one", len(got))
			}
		})
	}
}

// TestZstdFramesProbe: reading the start of a stream of frames decodes its
// first frame only, in the reader's goroutine.
func TestZstdFramesProbe(t *testing.T) {
	fs := fixture.ZstdFramesOf(fixture.MixedContent(1<<20, 17), 64<<10)
	z := NewReader(bytes.NewReader(fixture.ConcatZstd(fs)), maxWindow, 2)
	defer z.Close()
	blk := make([]byte, 512) // a tar block
	if _, err := io.ReadFull(z, blk); err != nil || !bytes.Equal(blk, fs[0].Content[:512]) {
		t.Fatalf("first block: %v", err)
	}
	if z.started || z.frames != 1 {
		t.Fatalf("reading a block scanned %d frames (pipeline started: %v)", z.frames, z.started)
	}
}

// TestZstdFramesLargeSeekTable: of a seek table too large to keep, the
// footer is read, and the number of frames it says checked.
func TestZstdFramesLargeSeekTable(t *testing.T) {
	fs := fixture.ZstdFramesOf(fixture.MixedContent(256<<10, 18), 64<<10)
	table := func(count uint32) []byte {
		p := make([]byte, tableCap+entrySizeXXH)
		foot := p[len(p)-footerSize:]
		binary.LittleEndian.PutUint32(foot, count)
		foot[4] = checksumFlag
		binary.LittleEndian.PutUint32(foot[5:], fixture.SeekableMagic)
		return append(fixture.ConcatZstd(fs), fixture.SkippableFrame(tableMagic, p)...)
	}
	if got, _, err := readZstdFrames(table(uint32(len(fs))), 2, 1<<20); err != nil || !bytes.Equal(got, fixture.ContentOf(fs)) {
		t.Fatalf("a large table that says %d frames: %d bytes, %v", len(fs), len(got), err)
	}
	want := fmt.Sprintf("zstd: the seek table at offset %d says %d frames, there are %d", len(fixture.ConcatZstd(fs)), len(fs)+1, len(fs))
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
	data := fixture.MixedContent(3<<20+7, 19)
	small := fixture.ZstdFramesOf(data, 64<<10)
	mixed := append(append(small[:6:6], fixture.ZstdFramesOf(fixture.RandomBytes(9<<20, 6), 9<<20)...), small[6:]...)
	lying := append(fixture.ConcatZstd(small), fixture.SeekTableOf(small)...)
	binary.LittleEndian.PutUint32(lying[len(fixture.ConcatZstd(small))+8+4:], 1) // frame 0's content size
	for _, tc := range []struct {
		name     string
		in       []byte
		want     []byte
		minLent  int // frames lent at least
		err      string
		onlyRead bool // nothing may be lent
	}{
		{name: "seekable", in: seekableBytes(t, data, Options{FrameSize: 64 << 10}, 1<<20), want: data, minLent: len(small)},
		{name: "pzstd", in: fixture.PzstdFrames(small), want: data, minLent: len(small)},
		// The read that finds the streamed frame's end goes on into the
		// next frame: that one is read, not lent.
		{name: "a streamed frame among them", in: fixture.ConcatZstd(mixed), want: fixture.ContentOf(mixed), minLent: len(small) - 1},
		{name: "one stream", in: fixture.ConcatZstd(append(fixture.ZstdFramesOf(fixture.RandomBytes(9<<20, 7), 9<<20), small...)), want: append(fixture.RandomBytes(9<<20, 7), data...), onlyRead: true},
		{name: "a lying seek table", in: lying, want: data, minLent: len(small), err: "zstd: the seek table says frame 0 (at offset 0) decompresses to 1 bytes"},
	} {
		for _, workers := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, workers), func(t *testing.T) {
				z := NewReader(bytes.NewReader(tc.in), maxWindow, workers)
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
					b, release, ok := z.Lend()
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

package zstdframe

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// seekableBytes compresses data with a Writer, written in
// pieces of chunk bytes.
func seekableBytes(t testing.TB, data []byte, opts Options, chunk int) []byte {
	t.Helper()
	var out bytes.Buffer
	w := NewWriter(&out, opts)
	for p := data; len(p) > 0; {
		k := min(chunk, len(p))
		n, err := w.Write(p[:k])
		if err != nil || n != k {
			t.Fatalf("Write: %d of %d bytes, %v", n, k, err)
		}
		p = p[k:]
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return out.Bytes()
}

// readSeekTable parses the seek table at the end of b and returns it with the
// offset where it starts.
func readSeekTable(t testing.TB, b []byte) (Table, int) {
	t.Helper()
	if len(b) < 8+footerSize {
		t.Fatalf("%d bytes: too short for a seek table", len(b))
	}
	n := binary.LittleEndian.Uint32(b[len(b)-footerSize:])
	desc := b[len(b)-5]
	size := entrySize
	if desc&checksumFlag != 0 {
		size = entrySizeXXH
	}
	start := len(b) - footerSize - int(n)*size - 8
	if start < 0 || binary.LittleEndian.Uint32(b[start:]) != tableMagic ||
		int(binary.LittleEndian.Uint32(b[start+4:])) != len(b)-start-8 {
		t.Fatalf("no seek table skippable frame where the footer puts it (offset %d)", start)
	}
	st, err := parseTable(b[start+8:])
	if err != nil {
		t.Fatalf("seek table: %v", err)
	}
	return st, start
}

func TestSeekableZstdWriter(t *testing.T) {
	const frame = 64 << 10
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"one byte", []byte{'x'}},
		{"one frame", fixture.MixedContent(frame, 1)},
		{"three frames and a bit", fixture.MixedContent(3*frame+7, 2)},
		{"a MiB", fixture.MixedContent(1<<20+1234, 3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			z := seekableBytes(t, tc.data, Options{FrameSize: frame}, 10000)

			// Deterministic: other workers, other write sizes, same bytes.
			for _, o := range []struct{ workers, chunk int }{{1, 1 << 20}, {3, 333}, {8, frame}} {
				again := seekableBytes(t, tc.data, Options{FrameSize: frame, Workers: o.workers}, o.chunk)
				if !bytes.Equal(again, z) {
					t.Fatalf("%d workers, writes of %d: %d bytes differ from the first %d", o.workers, o.chunk, len(again), len(z))
				}
			}

			// klauspost's single reader, as every other reader, takes it as
			// one zstd stream.
			zr, err := zstd.NewReader(bytes.NewReader(z), zstd.WithDecoderConcurrency(1))
			if err != nil {
				t.Fatal(err)
			}
			defer zr.Close()
			got, err := io.ReadAll(zr)
			if err != nil || !bytes.Equal(got, tc.data) {
				t.Fatalf("zstd.NewReader: %d of %d bytes, %v", len(got), len(tc.data), err)
			}
			// holdfast's own reader.
			rc := NewReader(bytes.NewReader(z), maxWindow, 0)
			got, err = io.ReadAll(rc)
			rc.Close()
			if err != nil || !bytes.Equal(got, tc.data) {
				t.Fatalf("Reader: %d of %d bytes, %v", len(got), len(tc.data), err)
			}

			// holdfast decodes it frame by frame.
			if got, zf, err := readZstdFrames(z, 2, 1<<20); err != nil || !bytes.Equal(got, tc.data) || zf.single != nil {
				t.Fatalf("frame by frame: %d of %d bytes, %v (as one stream: %v)", len(got), len(tc.data), err, zf.single != nil)
			}

			// The seek table: one entry per frame, with checksums, whose
			// sizes add up to the frames and the content.
			st, start := readSeekTable(t, z)
			want := max(1, (len(tc.data)+frame-1)/frame)
			if st.Len() != want || !st.Sums {
				t.Fatalf("seek table: %d entries (checksums %v), want %d with checksums", st.Len(), st.Sums, want)
			}
			off, dec := 0, 0
			for i := range st.Len() {
				e := st.Frame(i)
				var h zstd.Header
				if err := h.Decode(z[off:]); err != nil || h.Skippable {
					t.Fatalf("frame %d at offset %d: %v (skippable %v)", i, off, err, h.Skippable)
				}
				// The encoder leaves out the content size of a frame of less
				// than 256 bytes (only the last can be one).
				if (h.HasFCS || e.Size >= 256) && h.FrameContentSize != e.Size {
					t.Fatalf("frame %d declares content size %d (%v), the table %d", i, h.FrameContentSize, h.HasFCS, e.Size)
				}
				end := off + int(e.Comp)
				if sum := binary.LittleEndian.Uint32(z[end-4:]); sum != e.Sum {
					t.Fatalf("frame %d: checksum %08x, the table %08x", i, sum, e.Sum)
				}
				// Each frame decodes on its own to its part of the content.
				part, err := zr.DecodeAll(z[off:end], nil)
				if err == nil && !bytes.Equal(part, tc.data[dec:dec+int(e.Size)]) {
					err = errors.New("other bytes")
				}
				if err != nil {
					t.Fatalf("frame %d alone: %v", i, err)
				}
				off, dec = end, dec+int(e.Size)
			}
			if off != start || dec != len(tc.data) {
				t.Fatalf("frames end at %d (content %d), the table starts at %d (content %d)", off, dec, start, len(tc.data))
			}
		})
	}
}

// TestSeekableZstdCLI has the zstd CLI decode and check what the writer
// writes: the format is zstd's, not only holdfast's.
func TestSeekableZstdCLI(t *testing.T) {
	zstdCLI, err := exec.LookPath("zstd")
	if err != nil {
		testenv.Missing(t, "zstd", "the zstd CLI is not on PATH (make deps installs it)")
	}
	for _, data := range [][]byte{nil, fixture.MixedContent(700<<10, 4)} {
		z := seekableBytes(t, data, Options{FrameSize: 128 << 10, Level: 19}, 1<<20)
		cmd := exec.Command(zstdCLI, "-d", "-c", "-q")
		cmd.Stdin = bytes.NewReader(z)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		got, err := cmd.Output()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("zstd -d: %d of %d bytes, %v: %s", len(got), len(data), err, stderr.String())
		}
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("disk full")
	}
	f.n--
	return len(p), nil
}

func TestSeekableZstdWriterErrors(t *testing.T) {
	data := fixture.MixedContent(1<<20, 5)
	w := NewWriter(&failWriter{n: 2}, Options{FrameSize: 64 << 10, Workers: 2})
	var werr error
	for p := data; len(p) > 0 && werr == nil; p = p[min(len(p), 50000):] {
		_, werr = w.Write(p[:min(len(p), 50000)])
	}
	if werr == nil || werr.Error() != "disk full" {
		t.Fatalf("Write: %v, want the writer's error", werr)
	}
	if err := w.Close(); err == nil || err.Error() != "disk full" {
		t.Fatalf("Close: %v, want the writer's error", err)
	}

	var out bytes.Buffer
	w = NewWriter(&out, Options{})
	if _, err := w.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	n := out.Len()
	if err := w.Close(); err != nil || out.Len() != n {
		t.Fatalf("second Close: %v, %d bytes written after %d", err, out.Len(), n)
	}
	if _, err := w.Write([]byte("y")); err == nil {
		t.Fatal("Write after Close: no error")
	}
}

// TestSeekableZstdWriterBytes: the bytes written for a given input, frame
// size and level are those the writer has always written (the SHA-256 of
// each output, taken once), whatever the workers: an archive exported
// again is the same file, so that a digest or signature of it still holds.
func TestSeekableZstdWriterBytes(t *testing.T) {
	t.Parallel()
	data := fixture.MixedContent(6<<20+12345, 3)
	for _, c := range []struct {
		opts Options
		sum  string
	}{
		{Options{}, "2f062fea1059b0b6f0c20a73655e096e5d45e6097732a9a4b4807b97a4774832"},
		{Options{Workers: 1}, "2f062fea1059b0b6f0c20a73655e096e5d45e6097732a9a4b4807b97a4774832"},
		{Options{FrameSize: 1 << 20, Workers: 3}, "c173253c8ada65bc05d7b60c267a5985125d1214ed15ecdd191d4fdeeb324c20"},
		{Options{FrameSize: 1 << 20, Level: 1}, "b39324b4ca26203d4d153f1e9f894e40a28fe95a475d0d2f062178bebac25b5f"},
		{Options{FrameSize: 512 << 10, Level: 19}, "899abe990ce11f1f7c98f998c977cdbd22925bc7b04b647b781fac67501ac489"},
	} {
		if got := fmt.Sprintf("%x", sha256.Sum256(seekableBytes(t, data, c.opts, 100_003))); got != c.sum {
			t.Errorf("%+v: output SHA-256 %s, want %s", c.opts, got, c.sum)
		}
	}
	if got := fmt.Sprintf("%x", sha256.Sum256(seekableBytes(t, nil, Options{}, 1))); got != "b7d15a5ad22abefd4349ba83924d40cef26eb64f2895259cd6d4fe6957539b6c" {
		t.Errorf("empty input: output SHA-256 %s", got)
	}
}

// TestSeekableZstdWriterMemory: what the writer allocates is bounded by its
// frames in flight (workers + 2, each its content and its compressed bytes)
// and its encoders (a window of a frame and their tables each), however
// much is written through it: 64 MiB, half of it incompressible.
func TestSeekableZstdWriterMemory(t *testing.T) {
	data := fixture.MixedContent(64<<20, 9)
	const size, workers = 4 << 20, 2
	frame := 2*size + size>>8 + 1<<10
	bound := uint64((workers+2)*frame + workers*(size+4<<20))
	if m := (Options{FrameSize: size, Workers: workers}).Memory(); uint64(m) != bound {
		t.Errorf("Memory says %d bytes, want %d", m, bound)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	w := NewWriter(io.Discard, Options{FrameSize: size, Workers: workers})
	for p := data; len(p) > 0; p = p[min(len(p), 100_003):] {
		if _, err := w.Write(p[:min(len(p), 100_003)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > bound {
		t.Errorf("writing %d MiB allocated %.1f MiB; want at most %.1f MiB (%d frames of %d MiB in flight, %d encoders)",
			len(data)>>20, float64(got)/(1<<20), float64(bound)/(1<<20), workers+2, size>>20, workers)
	}
}

package archive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/holdfast-project/holdfast/internal/archive/zstdframe"
	"github.com/holdfast-project/holdfast/internal/fixture"
)

// zstdBenchArchive writes, once per benchmark, a docker save ≥ 25 archive of
// layers × size bytes (every other layer compressible, as the bench harness
// makes them) compressed as one zstd frame with an 8 MiB window, the
// klauspost/compress defaults: what Hauler, Zarf and K3s write.
// HOLDFAST_BENCH_LAYER_MIB sets the layer size (default 32 MiB).
func zstdBenchArchive(b *testing.B, layers int, c fixture.Compression) (string, int64) {
	b.Helper()
	img := zstdBenchImage(b, layers)
	name := filepath.Join(b.TempDir(), "archive.tar"+c.Extension())
	err := fixture.WriteFileAtomic(name, func(w io.Writer) error {
		cw, err := fixture.Compress(w, c, fixture.CompressOptions{ZstdWindow: 8 << 20})
		if err != nil {
			return err
		}
		if err := fixture.WriteHybrid(b.Context(), cw, img); err != nil {
			return err
		}
		return cw.Close()
	})
	if err != nil {
		b.Fatal(err)
	}
	return name, drainedSize(b, name)
}

// zstdBenchSeekable writes the archive of zstdBenchArchive as seekable zstd
// (zstdframe.Writer, its defaults): what holdfast export writes.
func zstdBenchSeekable(b *testing.B, layers int) (string, int64) {
	b.Helper()
	img := zstdBenchImage(b, layers)
	name := filepath.Join(b.TempDir(), "archive.tar.zst")
	err := fixture.WriteFileAtomic(name, func(w io.Writer) error {
		zw := zstdframe.NewWriter(w, zstdframe.Options{})
		if err := fixture.WriteHybrid(b.Context(), zw, img); err != nil {
			return err
		}
		return zw.Close()
	})
	if err != nil {
		b.Fatal(err)
	}
	return name, drainedSize(b, name)
}

// zstdBenchImage is the image of zstdBenchArchive.
func zstdBenchImage(b *testing.B, layers int) *fixture.Image {
	b.Helper()
	size := int64(32 << 20)
	if s := os.Getenv("HOLDFAST_BENCH_LAYER_MIB"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("HOLDFAST_BENCH_LAYER_MIB=%q: want a number of MiB", s)
		}
		size = int64(n) << 20
	}
	specs := fixture.UniformLayers(layers, size, false, 7)
	for k := range specs {
		specs[k].Compressible = k%2 == 0
	}
	img, err := fixture.Build(b.Context(), fixture.ImageSpec{Names: []string{"bench.example/zstd:1"}, Layers: specs})
	if err != nil {
		b.Fatal(err)
	}
	return img
}

// drainedSize is the decompressed size of the archive in file name.
func drainedSize(b *testing.B, name string) int64 {
	f, err := os.Open(name)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	n, _, err := Drain(f)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// hashStore hashes every blob with sha256, as the content store does, checks
// the digest and keeps nothing.
type hashStore struct{}

func (hashStore) Has(context.Context, digest.Digest) (bool, error) { return false, nil }

func (hashStore) Put(_ context.Context, expected digest.Digest, size int64, r io.Reader) (digest.Digest, error) {
	h := sha256.New()
	buf := make([]byte, 1<<20-4<<10)
	n, err := io.CopyBuffer(h, io.LimitReader(r, size), buf)
	if err != nil {
		return "", err
	}
	if n != size {
		return "", fmt.Errorf("short blob: %d of %d bytes", n, size)
	}
	d := digest.NewDigest(digest.SHA256, h)
	if expected != "" && d != expected {
		return "", fmt.Errorf("digest %s, expected %s", d, expected)
	}
	return d, nil
}

// directStore does what holdfast's direct write path does with each blob:
// sha256 of the bytes in the calling goroutine, each 1 MiB − 4 KiB chunk
// written by another goroutine, with O_DIRECT where the filesystem takes it,
// while the next is read and hashed; then fsync. It keeps nothing.
type directStore struct{ dir string }

func (directStore) Has(context.Context, digest.Digest) (bool, error) { return false, nil }

func (s directStore) Put(_ context.Context, expected digest.Digest, size int64, r io.Reader) (digest.Digest, error) {
	const chunk = 1<<20 - 4<<10
	f, err := os.CreateTemp(s.dir, "blob-")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	direct := false
	if fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0); err == nil {
		_, err = unix.FcntlInt(f.Fd(), unix.F_SETFL, fl|unix.O_DIRECT)
		direct = err == nil
	}
	type piece struct {
		b []byte
		n int
	}
	full := make(chan piece, 1)
	free := make(chan []byte, 2)
	for range 2 {
		// 4 KiB-aligned buffers, as O_DIRECT wants them.
		raw := make([]byte, chunk+4096)
		off := int(-uintptr(unsafe.Pointer(&raw[0])) & 4095)
		free <- raw[off : off+chunk]
	}
	werr := make(chan error, 1)
	go func() {
		var err error
		for p := range full {
			if err == nil && direct && p.n%4096 != 0 {
				// The tail of the blob: buffered.
				var fl int
				if fl, err = unix.FcntlInt(f.Fd(), unix.F_GETFL, 0); err == nil {
					_, err = unix.FcntlInt(f.Fd(), unix.F_SETFL, fl&^unix.O_DIRECT)
					direct = false
				}
			}
			if err == nil {
				_, err = f.Write(p.b[:p.n])
			}
			free <- p.b
		}
		werr <- err
	}()
	h := sha256.New()
	var n int64
	var rerr error
	for n < size {
		b := <-free
		k, err := io.ReadFull(r, b[:min(int64(chunk), size-n)])
		h.Write(b[:k])
		n += int64(k)
		full <- piece{b, k}
		if err != nil {
			rerr = err
			break
		}
	}
	close(full)
	if err := <-werr; err != nil {
		return "", err
	}
	if rerr != nil {
		return "", rerr
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	d := digest.NewDigest(digest.SHA256, h)
	if expected != "" && d != expected {
		return "", fmt.Errorf("digest %s, expected %s", d, expected)
	}
	return d, nil
}

// BenchmarkWalkZstd walks a .tar.zst (and, to compare, the same archive as
// .tar.gz and as a plain .tar read as a stream) from a file: decode is the
// floor (Drain: the decoder alone), hash walks into hashStore (sha256 of
// every blob), direct into directStore (sha256 and O_DIRECT writes, as the
// direct write path). MB/s are of the decompressed archive.
// HOLDFAST_BENCH_ARCHIVE names an archive to walk instead (any compression:
// the bench harness's, a K3s airgap image archive). holdfast itself runs with
// one more P than CPUs (cmd/holdfast): GOMAXPROCS=3 on two CPUs does as it
// does.
func BenchmarkWalkZstd(b *testing.B) {
	comps := []fixture.Compression{fixture.Zstd, fixture.Gzip, fixture.None}
	given := os.Getenv("HOLDFAST_BENCH_ARCHIVE")
	if given != "" {
		comps = []fixture.Compression{"given"}
	}
	for _, c := range comps {
		b.Run(string(c), func(b *testing.B) {
			var name string
			var n int64
			if given != "" {
				name, n = given, drainedSize(b, given)
			} else {
				name, n = zstdBenchArchive(b, 8, c)
			}
			blobs := b.TempDir()
			b.Run("decode", func(b *testing.B) {
				b.SetBytes(n)
				for b.Loop() {
					f := openBench(b, name)
					if _, _, err := Drain(f); err != nil {
						b.Fatal(err)
					}
					f.Close()
				}
			})
			for _, s := range []struct {
				name string
				st   Store
			}{{"hash", hashStore{}}, {"direct", directStore{blobs}}} {
				// A stream, not a file: the walk reads it once, in order.
				b.Run(s.name, walkFile(name, n, s.st, true))
			}
		})
	}
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU seconds per op since start, and the share of
// the wall clock they make (cores busy).
func reportCPU(b *testing.B, start time.Duration, wall time.Time) {
	cpu := cpuTime(b) - start
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric(cpu.Seconds()/time.Since(wall).Seconds(), "cores")
}

// BenchmarkZstdFrames decodes the bench archive (256 MiB, half of it
// compressible) as one zstd frame, the path every one-frame .tar.zst takes,
// and as seekable zstd of 4 MiB frames (zstdframe.Writer) on 1, 2 and the
// default number of workers; and walks the seekable one into hashStore, as
// BenchmarkWalkZstd does the one-frame one, as a stream and from the file
// (by its seek table), and the same archive as a plain .tar from the file.
// MB/s are of the decompressed archive; cpu-s/op the CPU time of the
// process per op.
func BenchmarkZstdFrames(b *testing.B) {
	decode := func(name string, n int64, workers int) func(b *testing.B) {
		return func(b *testing.B) {
			b.SetBytes(n)
			cpu, wall := cpuTime(b), time.Now()
			for b.Loop() {
				f := openBench(b, name)
				if _, _, err := DrainWorkers(f, workers); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
			reportCPU(b, cpu, wall)
			if fi, err := os.Stat(name); err == nil {
				b.ReportMetric(float64(fi.Size())/float64(n), "ratio")
			}
		}
	}
	b.Run("one-frame", func(b *testing.B) {
		name, n := zstdBenchArchive(b, 8, fixture.Zstd)
		b.Run("decode", decode(name, n, 0))
	})
	b.Run("seekable", func(b *testing.B) {
		name, n := zstdBenchSeekable(b, 8)
		for _, w := range []int{1, 2, 0} {
			label := "decode-" + strconv.Itoa(w)
			if w == 0 {
				label = "decode-default"
			}
			b.Run(label, decode(name, n, w))
		}
		b.Run("hash", walkFile(name, n, hashStore{}, true))
		b.Run("hash-by-table", walkFile(name, n, hashStore{}, false))
	})
	b.Run("tar", func(b *testing.B) {
		name, n := zstdBenchArchive(b, 8, fixture.None)
		b.Run("hash", walkFile(name, n, hashStore{}, false))
	})
}

// openBench opens the bench archive name.
func openBench(b *testing.B, name string) *os.File {
	f, err := os.Open(name)
	if err != nil {
		b.Fatal(err)
	}
	return f
}

// walkFile walks the archive name (n bytes decompressed) into st, from the
// file, or as a stream read once in order, and reports the CPU it took.
func walkFile(name string, n int64, st Store, stream bool) func(b *testing.B) {
	return func(b *testing.B) {
		b.SetBytes(n)
		cpu, wall := cpuTime(b), time.Now()
		for b.Loop() {
			f := openBench(b, name)
			var r io.Reader = f
			if stream {
				r = struct{ io.Reader }{f}
			}
			_, err := Walk(b.Context(), r, st)
			f.Close()
			if err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, cpu, wall)
	}
}

// BenchmarkSeekableFrameSize writes 256 MiB, alternately 256 KiB of text
// and of random bytes, as seekable zstd with frames of 1 to 16 MiB, and
// decodes it on 1 and 2 workers: the ratio (compressed/original) and the
// speeds that chose zstdframe.DefaultFrameSize.
func BenchmarkSeekableFrameSize(b *testing.B) {
	data := fixture.MixedContent(256<<20, 42)
	for _, size := range []int{1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20} {
		b.Run(strconv.Itoa(size>>20)+"MiB", func(b *testing.B) {
			var z bytes.Buffer
			b.Run("write", func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				cpu, wall := cpuTime(b), time.Now()
				for b.Loop() {
					z.Reset()
					w := zstdframe.NewWriter(&z, zstdframe.Options{FrameSize: size})
					if _, err := w.Write(data); err != nil {
						b.Fatal(err)
					}
					if err := w.Close(); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, cpu, wall)
				b.ReportMetric(float64(z.Len())/float64(len(data)), "ratio")
			})
			for _, workers := range []int{1, 2} {
				b.Run("decode-"+strconv.Itoa(workers), func(b *testing.B) {
					b.SetBytes(int64(len(data)))
					cpu, wall := cpuTime(b), time.Now()
					for b.Loop() {
						n, _, err := DrainWorkers(bytes.NewReader(z.Bytes()), workers)
						if err != nil || n != int64(len(data)) {
							b.Fatalf("%d bytes, %v", n, err)
						}
					}
					reportCPU(b, cpu, wall)
				})
			}
		})
	}
}

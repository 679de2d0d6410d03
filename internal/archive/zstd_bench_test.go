package archive

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"unsafe"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// zstdBenchArchive writes, once per benchmark, a docker save ≥ 25 archive of
// layers × size bytes (every other layer compressible, as the bench harness
// makes them) compressed as one zstd frame with an 8 MiB window, the
// klauspost/compress defaults: what Hauler, Zarf and K3s write.
// HOLDFAST_BENCH_LAYER_MIB sets the layer size (default 32 MiB).
func zstdBenchArchive(b *testing.B, layers int, c fixture.Compression) (string, int64) {
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
	name := filepath.Join(b.TempDir(), "archive.tar"+c.Extension())
	err = fixture.WriteFileAtomic(name, func(w io.Writer) error {
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
			open := func(b *testing.B) *os.File {
				f, err := os.Open(name)
				if err != nil {
					b.Fatal(err)
				}
				return f
			}
			b.Run("decode", func(b *testing.B) {
				b.SetBytes(n)
				for b.Loop() {
					f := open(b)
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
				b.Run(s.name, func(b *testing.B) {
					b.SetBytes(n)
					for b.Loop() {
						f := open(b)
						// A stream, not a file: the walk reads it once, in order.
						_, err := Walk(b.Context(), struct{ io.Reader }{f}, s.st)
						f.Close()
						if err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

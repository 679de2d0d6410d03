package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// rssLimit is what the whole `holdfast sync` process may reach on a hostile file.
const rssLimit = 150 << 20

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

// syncRSS runs `holdfast sync` on one images dir and returns its result and
// its peak RSS; see measured.
func syncRSS(t *testing.T, d *daemon, imagesDir, dataDir string, extra ...string) (result, int64, time.Duration) {
	t.Helper()
	return measured(t, append([]string{"sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir}, extra...)...)
}

// measured runs holdfast with args and returns its result, its peak RSS
// (rusage ru_maxrss of the holdfast process, read by the test binary re-run
// as a small wrapper: see maxRSSEnv) and how long it ran.
func measured(t *testing.T, args ...string) (result, int64, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "maxrss")
	cmd := exec.CommandContext(ctx, self, append([]string{holdfastBin}, args...)...)
	cmd.Env = append(os.Environ(), maxRSSEnv+"="+out)
	start := time.Now()
	res := runHoldfast(t, cmd)
	took := time.Since(start)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("reading the peak RSS: %v\n%s", err, res.Stderr)
	}
	kib, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return res, kib << 10, took
}

// TestHostileDecompression gives `holdfast sync` small files that decompress
// to a lot, or declare decoder windows and dictionaries of gigabytes: each
// ends with one clear error naming the file, and the process's peak RSS stays
// under 150 MiB. A legitimately large archive — a zstd frame with a 128 MiB
// window and more than 128 MiB of data — still imports.
func TestHostileDecompression(t *testing.T) {
	d, _, _ := embeddedScene(t)
	root := tempDir(t)
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

	type hostile struct {
		name, file, cause string
		write             func(w io.Writer)
		extra             []string // flags for the sync
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(root, &fs); err != nil {
		t.Fatal(err)
	}
	free := int64(fs.Bavail) * fs.Bsize
	minFree := fmt.Sprintf("%dMiB", (free-4<<30)>>20) // a 10 GiB blob does not fit, a small one does
	cases := []hostile{
		{name: "zstd-2gib-window", file: "zstd-2gib-window.tar.zst",
			cause: "zstd: a frame declares a 2 GiB window, more than the 128 MiB holdfast decodes",
			write: func(w io.Writer) { w.Write(zstdFrame(31, plain, 2<<30)) }},
		{name: "zstd-2gib-window-second-frame", file: "zstd-second-frame.tar.zst",
			cause: "zstd: a frame declares a window larger than the 128 MiB holdfast decodes",
			write: func(w io.Writer) {
				w.Write(zstdFrame(20, plain, 0))
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
		{name: "gzip-10gib-zero-layer", file: "gzip-bomb-layer.tar.gz",
			cause: "must stay free (--min-free)", write: bombLayer, extra: []string{"--min-free", minFree}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.extra != nil && free < 6<<30 {
				testenv.Missing(t, "disk", fmt.Sprintf("%s needs 6 GiB free on %s (--min-free is set 4 GiB below it); %d MiB are", c.name, root, free>>20))
			}
			dir := filepath.Join(root, c.name)
			path := filepath.Join(dir, "images", c.file)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			c.write(f)
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			st, _ := os.Stat(path)
			res, rss, took := syncRSS(t, d, filepath.Join(dir, "images"), filepath.Join(dir, "data"), c.extra...)
			errs := errorLines(res.Stderr)
			t.Logf("outcome: file=%d KiB exit=%d peak_rss=%d MiB took=%s message=%q", st.Size()>>10, res.Code, rss>>20, took.Round(time.Millisecond), strings.Join(errs, " | "))
			if res.Code != 1 || len(errs) != 1 || !strings.Contains(errs[0], c.file) || !strings.Contains(errs[0], c.cause) {
				t.Errorf("sync exited %d with errors %q; want 1 and one error naming %s with %q\n%s", res.Code, errs, c.file, c.cause, tail(res.Stderr, 10))
			}
			if rss >= rssLimit {
				t.Errorf("peak RSS %d MiB, want under %d MiB", rss>>20, rssLimit>>20)
			}
			if refs := d.ingests(t); len(refs) != 0 {
				t.Errorf("ingests left: %v", refs)
			}
			if _, ok := d.leaseOf(t, path); ok {
				t.Errorf("a lease was left for %s", path)
			}
		})
	}

	// Legitimately large: one layer of 144 MiB, the archive zstd-compressed
	// with a 128 MiB window.
	t.Run("zstd-128mib-window-144mib-layer", func(t *testing.T) {
		big := build(t, fixture.ImageSpec{Names: []string{"e2e.local/hostile/large:1"}, Layers: []fixture.LayerSpec{{Size: 144 << 20, Compressible: true, Seed: 11}}})
		dir := filepath.Join(root, "large")
		path := filepath.Join(dir, "images", "large.tar.zst")
		writeArchive(t, path, fixture.Zstd, fixture.CompressOptions{ZstdWindow: 128 << 20},
			func(ctx context.Context, w io.Writer) error {
				return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerd}, big)
			})
		if w := zstdWindow(t, path); w != 128<<20 {
			t.Fatalf("the archive declares a %d-byte window, want 128 MiB", w)
		}
		st, _ := os.Stat(path)
		res, rss, took := syncRSS(t, d, filepath.Join(dir, "images"), filepath.Join(dir, "data"))
		t.Logf("outcome: file=%d KiB exit=%d peak_rss=%d MiB took=%s message=%q", st.Size()>>10, res.Code, rss>>20, took.Round(time.Millisecond), strings.Join(errorLines(res.Stderr), " | "))
		if res.Code != 0 {
			t.Fatalf("sync exited %d\n%s", res.Code, tail(res.Stderr, 10))
		}
		if rec, ok := d.record(t, "e2e.local/hostile/large:1"); !ok || rec.Labels["io.holdfast.pinned"] != "pinned" {
			t.Errorf("e2e.local/hostile/large:1 not imported and pinned: %v %v", ok, rec.Labels)
		}
	})
}

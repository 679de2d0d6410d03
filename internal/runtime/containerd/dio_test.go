package containerd

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// sizes crosses every chunk and alignment boundary the writers care about.
var dioSizes = []int{0, 1, 511, 512, 4095, 4096, 4097, writeChunk - 1, writeChunk, writeChunk + 1, 3*writeChunk + 12345}

func TestCopyHashedCopiesAndHashes(t *testing.T) {
	for i, n := range dioSizes {
		data := randomBytes(n, uint64(i))
		var out bytes.Buffer
		h := sha256.New()
		got, err := copyHashed(&out, h, iotestHalfReader{bytes.NewReader(data)})
		if err != nil || got != int64(n) {
			t.Fatalf("size %d: copied %d, %v", n, got, err)
		}
		if !bytes.Equal(out.Bytes(), data) {
			t.Fatalf("size %d: the bytes written differ from the bytes read", n)
		}
		if want := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), want[:]) {
			t.Fatalf("size %d: wrong hash", n)
		}
	}
}

func TestCopyHashedStopsOnErrors(t *testing.T) {
	data := randomBytes(8*writeChunk, 7)
	boom := errors.New("disk full")
	w := &failingWriter{after: 2, err: boom}
	src := &countingSrc{r: bytes.NewReader(data)}
	if _, err := copyHashed(w, sha256.New(), src); !errors.Is(err, boom) {
		t.Fatalf("a failing write: got %v, want %v", err, boom)
	}
	if src.n >= int64(len(data)) {
		t.Errorf("the copy read all %d bytes after its write failed", src.n)
	}
	bad := errors.New("bad frame")
	if _, err := copyHashed(io.Discard, sha256.New(), io.MultiReader(bytes.NewReader(data[:5000]), errReader{bad})); !errors.Is(err, bad) {
		t.Fatalf("a failing read: got %v, want %v", err, bad)
	}
}

// TestDIOFileWritesEveryLength writes files of every boundary length through
// a dioFile, in the chunks copyHashed hands it, and reads them back; on a
// filesystem that reports direct I/O alignment it checks the writes were
// direct.
func TestDIOFileWritesEveryLength(t *testing.T) {
	dir := t.TempDir()
	for i, n := range dioSizes {
		data := randomBytes(n, uint64(100+i))
		f, err := os.Create(filepath.Join(dir, "blob"))
		if err != nil {
			t.Fatal(err)
		}
		w := newDIOFile(f)
		wasDirect := w.direct
		var st unix.Statx_t
		if err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &st); err == nil && st.Mask&unix.STATX_DIOALIGN != 0 && st.Dio_offset_align > 0 && !wasDirect {
			t.Fatalf("the filesystem takes direct I/O (aligned to %d), but the file is written buffered", st.Dio_offset_align)
		}
		if _, err := copyHashed(w, sha256.New(), bytes.NewReader(data)); err != nil {
			t.Fatalf("size %d: %v", n, err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		back, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back, data) {
			t.Fatalf("size %d (direct %v): read back %d bytes that differ", n, wasDirect, len(back))
		}
		if n >= writeChunk && wasDirect && w.direct && n%w.align != 0 {
			t.Errorf("size %d: a tail of %d bytes left the file in direct mode", n, n%w.align)
		}
	}
}

type iotestHalfReader struct{ r io.Reader }

func (h iotestHalfReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:len(p)/2]
	}
	return h.r.Read(p)
}

type failingWriter struct {
	after int
	err   error
}

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.after == 0 {
		return 0, w.err
	}
	w.after--
	return len(p), nil
}

type countingSrc struct {
	r io.Reader
	n int64
}

func (c *countingSrc) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

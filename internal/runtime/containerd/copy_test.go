package containerd

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
)

// sizesWriter records the size of every write.
type sizesWriter struct {
	bytes.Buffer
	sizes []int
}

func (w *sizesWriter) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	return w.Buffer.Write(p)
}

// blockReader returns at most block bytes a read, as a decompressor does.
type blockReader struct {
	r     io.Reader
	block int
}

func (b *blockReader) Read(p []byte) (int, error) { return b.r.Read(p[:min(len(p), b.block)]) }

func TestCopyFullWritesWholeBuffers(t *testing.T) {
	src := bytes.Repeat([]byte("0123456789abcdef"), 10_000) // 160,000 bytes
	var dst sizesWriter
	n, err := copyFull(&dst, &blockReader{r: bytes.NewReader(src), block: 4096}, make([]byte, 50_000))
	if err != nil || n != int64(len(src)) {
		t.Fatalf("copyFull = %d, %v; want %d, nil", n, err, len(src))
	}
	if !bytes.Equal(dst.Bytes(), src) {
		t.Fatal("copied bytes differ")
	}
	if want := []int{50_000, 50_000, 50_000, 10_000}; !slices.Equal(dst.sizes, want) {
		t.Fatalf("write sizes %v, want %v", dst.sizes, want)
	}
}

func TestCopyFullReturnsReadErrors(t *testing.T) {
	boom := errors.New("zstd: corrupt block")
	var dst sizesWriter
	n, err := copyFull(&dst, io.MultiReader(bytes.NewReader(make([]byte, 70)), &failing{boom}), make([]byte, 50))
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want %v", err, boom)
	}
	if n != 70 || !slices.Equal(dst.sizes, []int{50, 20}) {
		t.Fatalf("copied %d bytes in writes of %v before the error, want all 70 read in writes of [50 20]", n, dst.sizes)
	}
}

type failing struct{ err error }

func (f *failing) Read([]byte) (int, error) { return 0, f.err }

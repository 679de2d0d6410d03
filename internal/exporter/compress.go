package exporter

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/holdfast-project/holdfast/internal/archive/zstdframe"
)

// Compression is how an export compresses the archive it writes.
type Compression string

const (
	// Zstd is seekable zstd: frames holdfast decodes on every core, which
	// any zstd decoder reads as one stream, and whose bytes depend only on
	// the input.
	Zstd Compression = "zstd"
	None Compression = "none"
)

// ParseCompression is the compression named v.
func ParseCompression(v string) (Compression, error) {
	switch c := Compression(v); c {
	case Zstd, None:
		return c, nil
	}
	return "", fmt.Errorf("%q: want zstd or none", v)
}

// Suffixes are the file name suffixes an archive of this compression must
// end in: K3s picks the decoder by the suffix.
func (c Compression) Suffixes() []string {
	if c == None {
		return []string{".tar"}
	}
	return []string{".tar.zst", ".tzst"}
}

// Writer compresses what is written to it into w; its Close ends the
// compression (and its workers), not w.
func (c Compression) Writer(w io.Writer) io.WriteCloser {
	if c == None {
		return nopWriteCloser{w}
	}
	return zstdframe.NewWriter(w, zstdframe.Options{})
}

// heapSlack is what an export's soft memory limit leaves beside the
// compressor's frames and encoders: the blob read ahead, the output buffer,
// the store's client and its messages.
const heapSlack = 40 << 20

// LimitMemory sets the Go runtime's soft memory limit to what an export of
// this compression holds (the compressor's Memory and heapSlack), unless
// GOMEMLIMIT sets one: the garbage of each blob read (containerd's messages
// of up to a MiB) is collected before the heap doubles over the frames in
// flight. It returns what restores the limit before.
func (c Compression) LimitMemory() func() {
	if os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	limit := int64(heapSlack)
	if c != None {
		limit += zstdframe.Options{}.Memory()
	}
	prev := debug.SetMemoryLimit(limit)
	return func() { debug.SetMemoryLimit(prev) }
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

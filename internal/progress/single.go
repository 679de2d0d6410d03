package progress

import (
	"io"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Single is one line for a whole export: every blob read counts on it. A nil
// one draws nothing.
type Single struct {
	line io.ReadCloser
	cur  *switchReader
}

// Single draws one line named name for a whole export of size bytes, once
// the display started.
func (d *Display) Single(name string, size int64) *Single {
	if d == nil {
		return nil
	}
	b := &Single{cur: &switchReader{}}
	b.line = d.reader(name, size, b.cur)
	return b
}

// Read is exporter.WriteOptions.Read: the blob's bytes count on the line.
func (b *Single) Read(desc ocispec.Descriptor, r io.ReadCloser) io.ReadCloser {
	if b == nil {
		return r
	}
	b.cur.r = r
	return struct {
		io.Reader
		io.Closer
	}{b.line, r}
}

// Close ends the line.
func (b *Single) Close() {
	if b != nil {
		b.line.Close()
	}
}

// switchReader reads from the blob being copied.
type switchReader struct{ r io.Reader }

func (s *switchReader) Read(p []byte) (int, error) { return s.r.Read(p) }
func (s *switchReader) Close() error               { return nil }

package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func layoutBlobOf(b blob) LayoutBlob {
	return LayoutBlob{Desc: b.desc(), Open: func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b.data)), nil
	}}
}

// testLayout is a layout of two images sharing a layer, the second one
// also given as a referrer of the first (an unnamed entry marked with its
// subject), its blobs given in no order and one twice.
func testLayout(t *testing.T) (Layout, image, image) {
	shared := randomLayer(3000, 1)
	a := imageWith(t, "amd64", shared, randomLayer(2000, 2))
	b := imageWith(t, "arm64", shared, randomLayer(1000, 3))
	var blobs []LayoutBlob
	for _, x := range append(b.blobs(), a.blobs()...) {
		blobs = append(blobs, layoutBlobOf(x))
	}
	return Layout{
		Index: []ocispec.Descriptor{
			withAnnotations(a.manifest.desc(), annotationContainerdName, "example.com/a:1", annotationRefName, "1"),
			withAnnotations(b.manifest.desc(), annotationManifestSubject, a.manifest.digest().String()),
		},
		DockerSave: []DockerSaveEntry{{Config: a.config.digest(), RepoTags: []string{"example.com/a:1"}, Layers: []digest.Digest{shared.digest(), a.layers[1].digest()}}},
		Blobs:      blobs,
	}, a, b
}

// TestWriteLayoutReadBack: a written layout is read as the images it
// names (the referrer skipped as one), each blob once, with headers that
// say nothing of who wrote it or when; writing it again gives the same
// bytes.
func TestWriteLayoutReadBack(t *testing.T) {
	ctx := context.Background()
	l, a, b := testLayout(t)
	var out bytes.Buffer
	st, err := WriteLayout(ctx, &out, l)
	if err != nil {
		t.Fatal(err)
	}
	if st.Blobs != 7 || st.TarBytes != int64(out.Len()) {
		t.Errorf("stats %+v for %d bytes; want 7 blobs (3 + 4, the shared layer once)", st, out.Len())
	}
	tr := tar.NewReader(bytes.NewReader(out.Bytes()))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if !h.ModTime.Equal(layoutEpoch) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || len(h.PAXRecords) > 0 {
			t.Errorf("%s: header %+v", h.Name, h)
		}
	}
	if strings.Join(names[:5], " ") != "oci-layout index.json manifest.json blobs/ blobs/sha256/" || len(names) != 12 {
		t.Errorf("entries %v", names)
	}
	res, err := Walk(ctx, bytes.NewReader(out.Bytes()), newMemStore())
	if err != nil {
		t.Fatal(err)
	}
	if res.Format != FormatHybrid || len(res.Images) != 1 || res.Images[0].Name != "example.com/a:1" || res.Images[0].Target.Digest != a.manifest.digest() {
		t.Errorf("read back %+v", res)
	}
	if len(res.Skipped) != 1 || res.Skipped[0].Digest != b.manifest.digest() || res.Skipped[0].Reason != "referrer" {
		t.Errorf("skipped %+v; want the referrer", res.Skipped)
	}
	var again bytes.Buffer
	if _, err := WriteLayout(ctx, &again, l); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), again.Bytes()) {
		t.Error("writing the same layout twice gave different bytes")
	}
}

// TestWriteLayoutBadBlob: a blob whose bytes are shorter, longer or other
// than its descriptor says fails the write, naming the blob.
func TestWriteLayoutBadBlob(t *testing.T) {
	for name, change := range map[string]func([]byte) []byte{
		"short": func(b []byte) []byte { return b[:len(b)-1] },
		"long":  func(b []byte) []byte { return append(b, 'x') },
		"other": func(b []byte) []byte { c := bytes.Clone(b); c[0] ^= 1; return c },
	} {
		t.Run(name, func(t *testing.T) {
			l, a, _ := testLayout(t)
			bad := a.layers[1]
			for i := range l.Blobs {
				if l.Blobs[i].Desc.Digest == bad.digest() {
					data := change(bad.data)
					l.Blobs[i].Open = func(context.Context) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
				}
			}
			_, err := WriteLayout(context.Background(), io.Discard, l)
			if err == nil || !strings.Contains(err.Error(), bad.digest().String()) {
				t.Fatalf("error %v; want one naming %s", err, bad.digest())
			}
		})
	}
}

// blobReadCounter counts the reads of a blob's stream, and those given less
// than aheadBlockSize.
type blobReadCounter struct {
	r            io.Reader
	reads, small int
}

func (c *blobReadCounter) Read(p []byte) (int, error) {
	c.reads++
	if len(p) < aheadBlockSize {
		c.small++
	}
	return c.r.Read(p)
}

func (c *blobReadCounter) Close() error { return nil }

// TestWriteLayoutLargeReads: a blob is read from the store in reads of
// aheadBlockSize, but for its last bytes. containerd's content API makes a
// round trip of each read: in reads of 32 KiB, a GiB took 32,768.
func TestWriteLayoutLargeReads(t *testing.T) {
	data := randomLayer(8<<20+5, 4)
	b := layoutBlobOf(data)
	c := &blobReadCounter{r: bytes.NewReader(data.data)}
	b.Open = func(context.Context) (io.ReadCloser, error) { return c, nil }
	cfg := randomLayer(10, 5)
	l := Layout{Index: []ocispec.Descriptor{cfg.desc()}, Blobs: []LayoutBlob{b}}
	if _, err := WriteLayout(context.Background(), io.Discard, l); err != nil {
		t.Fatal(err)
	}
	if c.reads > 8+2 || c.small > 2 {
		t.Errorf("an 8 MiB blob read in %d reads, %d of them of less than %d bytes; want at most 10, 2 (its end)", c.reads, c.small, aheadBlockSize)
	}
}

package archive

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// seekZstdImage is an OCI archive of one image of three layers (random,
// text, random) as a tar, and where the text layer starts in it.
func seekZstdImage(t testing.TB) (tarb []byte, text blob, textAt int) {
	t.Helper()
	text = blob{ocispec.MediaTypeImageLayer, fixture.MixedContent(600<<10, 31)}
	im := imageWith(t, "amd64", randomLayer(700<<10, 32), text, randomLayer(300<<10, 33))
	tarb = tarBytes(t, ociEntries("", indexJSON(t, withAnnotations(im.manifest.desc(), annotationContainerdName, "example.com/seek:1")), im.blobs()...))
	textAt = bytes.Index(tarb, text.data[:4096])
	if textAt < 0 {
		t.Fatal("the text layer is not in the tar")
	}
	return tarb, text, textAt
}

// streamedFramesOf cuts data into frames of 256 KiB of content, each as a
// streaming encoder writes it: no content size in its header (the encoder
// writes the header with the first block, before it knows the size), but
// the last one, which may fit in one block.
func streamedFramesOf(t testing.TB, data []byte) []fixture.ZstdFrame {
	t.Helper()
	const size = 256 << 10
	var fs []fixture.ZstdFrame
	for p := data; len(p) > 0; p = p[min(len(p), size):] {
		f := fixture.StreamedZstdFrame(p[:min(len(p), size)])
		var h zstd.Header
		if err := h.Decode(f.Comp); err != nil || len(p) > size && h.HasFCS {
			t.Fatal("a streamed frame says its content size")
		}
		fs = append(fs, f)
	}
	return fs
}

// walkBothWays walks in as a file (read by its seek table, if it has one
// holdfast trusts) and as a stream, each into a fresh store or the one
// prepare returns.
func walkBothWays(t *testing.T, in []byte, prepare func() *memStore) (seek, stream walkOutcome) {
	t.Helper()
	if prepare == nil {
		prepare = newMemStore
	}
	for _, o := range []struct {
		out *walkOutcome
		r   io.Reader
	}{{&seek, bytes.NewReader(in)}, {&stream, struct{ io.Reader }{bytes.NewReader(in)}}} {
		o.out.store = prepare()
		o.out.res, o.out.err = walk(t.Context(), o.r, o.out.store, WalkOptions{}, smallLimits())
	}
	return seek, stream
}

type walkOutcome struct {
	res   *Result
	err   error
	store *memStore
}

// seeksZstd reports whether in, read from a file, is read by its seek table.
func seeksZstd(t *testing.T, in []byte) bool {
	t.Helper()
	i, err := openInput(bytes.NewReader(in), smallLimits(), true)
	if err != nil {
		t.Fatal(err)
	}
	defer i.close()
	return i.sz != nil
}

// TestSeekZstdWalk: a seekable zstd archive read from a file is read by its
// seek table, its blobs written by deferred writes, and gives what the same
// bytes read as a stream give: the images, the blobs, the size read. So do
// frames without a content size, and an archive whose blobs the store has
// already (every frame still decoded, see TestSeekZstdCorrupt).
func TestSeekZstdWalk(t *testing.T) {
	tarb, text, _ := seekZstdImage(t)
	for _, tc := range []struct {
		name string
		fs   []fixture.ZstdFrame
	}{
		{"frames with sizes", fixture.ZstdFramesOf(tarb, 64<<10)},
		{"frames without sizes", streamedFramesOf(t, tarb)},
		{"one frame", fixture.ZstdFramesOf(tarb, len(tarb))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append(fixture.ConcatZstd(tc.fs), fixture.SeekTableOf(tc.fs)...)
			if !seeksZstd(t, in) {
				t.Fatal("not read by its seek table")
			}
			seek, stream := walkBothWays(t, in, nil)
			if seek.err != nil || stream.err != nil {
				t.Fatalf("errors: by the table %v, as a stream %v", seek.err, stream.err)
			}
			if len(seek.res.Images) != 1 || seek.res.Images[0].Name != "example.com/seek:1" || seek.res.Compression != Zstd || seek.res.BytesRead != int64(len(in)) {
				t.Fatalf("by the table: %+v", seek.res)
			}
			if !slices.EqualFunc(seek.res.Images, stream.res.Images, func(a, b Image) bool { return a.Name == b.Name && a.Target.Digest == b.Target.Digest }) ||
				!maps.Equal(seek.res.Blobs, stream.res.Blobs) || seek.res.BytesRead != stream.res.BytesRead {
				t.Fatalf("by the table %+v, as a stream %+v", seek.res, stream.res)
			}
			if !maps.EqualFunc(seek.store.blobs, stream.store.blobs, bytes.Equal) || !bytes.Equal(seek.store.blobs[text.digest()], text.data) {
				t.Fatalf("stores differ: %d blobs by the table, %d as a stream", len(seek.store.blobs), len(stream.store.blobs))
			}
		})
	}
	// A file without a table, or whose table does not tile it, is a stream;
	// so is any, for a walk that writes one blob at a time (its frames are
	// decoded on several cores only so).
	fs := fixture.ZstdFramesOf(tarb, 64<<10)
	i, err := openInput(bytes.NewReader(append(fixture.ConcatZstd(fs), fixture.SeekTableOf(fs)...)), smallLimits(), false)
	if err != nil || i.sz != nil || i.ahead == nil {
		t.Fatalf("not by the table: %v, read by it: %v", err, i != nil && i.sz != nil)
	}
	i.close()
	if seeksZstd(t, fixture.ConcatZstd(fs)) || seeksZstd(t, append(fixture.PzstdFrames(fs), fixture.SeekTableOf(fs)...)) {
		t.Fatal("read by a seek table it does not have, or that does not place its frames")
	}
}

// TestSeekZstdCorrupt: whatever is wrong with a seekable zstd file, read
// from a file it fails as it does read as a stream, with the same error: a
// broken frame (in a blob written, or in one the store has and nothing
// writes), a table that lies about a size or a checksum, a cut file, a lie
// about the content size of a frame that does not say its own, which moves
// every tar header after it.
func TestSeekZstdCorrupt(t *testing.T) {
	tarb, text, textAt := seekZstdImage(t)
	const size = 64 << 10
	fs := fixture.ZstdFramesOf(tarb, size)
	plain := fixture.ConcatZstd(fs)
	offs := make([]int, len(fs)+1)
	for i, f := range fs {
		offs[i+1] = offs[i] + len(f.Comp)
	}
	k := textAt/size + 2 // a frame inside the text layer
	good := append(bytes.Clone(plain), fixture.SeekTableOf(fs)...)
	entry := func(i int) int { return len(plain) + 8 + i*fixture.SeekEntrySize }
	edit := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	flipped := edit(func(b []byte) { b[offs[k]+len(fs[k].Comp)/2] ^= 0x40 })
	sfs := streamedFramesOf(t, tarb)
	sk := textAt/(256<<10) + 1 // a frame inside the text layer
	soffs := len(fixture.ConcatZstd(sfs[:sk]))
	unsized := func(n uint32) []byte {
		b := append(fixture.ConcatZstd(sfs), fixture.SeekTableOf(sfs)...)
		binary.LittleEndian.PutUint32(b[len(fixture.ConcatZstd(sfs))+8+sk*fixture.SeekEntrySize+4:], n)
		return b
	}
	hasText := func() *memStore {
		s := newMemStore()
		s.present[text.digest()] = true
		return s
	}

	for _, tc := range []struct {
		name    string
		in      []byte
		seeks   bool // read by its table
		prepare func() *memStore
		want    string
	}{
		{"flipped byte", flipped, true, nil, fmt.Sprintf("zstd: frame at offset %d: ", offs[k])},
		{"flipped byte in a blob the store has", flipped, true, hasText, fmt.Sprintf("zstd: frame at offset %d: ", offs[k])},
		{"table lies about a checksum", edit(func(b []byte) { b[entry(k)+8] ^= 1 }), true, nil,
			fmt.Sprintf("zstd: the seek table says frame %d (at offset %d) has checksum", k, offs[k])},
		{"table lies about a content size", edit(func(b []byte) { binary.LittleEndian.PutUint32(b[entry(k)+4:], 4096) }), false, nil,
			fmt.Sprintf("zstd: the seek table says frame %d (at offset %d) decompresses to 4096 bytes, it is %d", k, offs[k], size)},
		{"table lies about a compressed size", edit(func(b []byte) { binary.LittleEndian.PutUint32(b[entry(k):], uint32(len(fs[k].Comp)-4)) }), false, nil,
			fmt.Sprintf("zstd: the seek table says frame %d (at offset %d) is %d bytes compressed", k, offs[k], len(fs[k].Comp)-4)},
		{"cut", good[:offs[k]+100], false, nil, "zstd: unexpected EOF"},
		{"table says less of an unsized frame", unsized(256<<10 - 512), true, nil,
			fmt.Sprintf("zstd: the seek table says frame %d (at offset %d) decompresses to %d bytes, it is %d", sk, soffs, 256<<10-512, 256<<10)},
		{"table says more of an unsized frame", unsized(256<<10 + 512), true, nil,
			fmt.Sprintf("zstd: the seek table says frame %d (at offset %d) decompresses to %d bytes, it is %d", sk, soffs, 256<<10+512, 256<<10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := seeksZstd(t, tc.in); got != tc.seeks {
				t.Fatalf("read by its seek table: %v, want %v", got, tc.seeks)
			}
			seek, stream := walkBothWays(t, tc.in, tc.prepare)
			if seek.err == nil || seek.res != nil || !strings.HasPrefix(seek.err.Error(), tc.want) {
				t.Fatalf("by the table: %v, %v; want an error starting %q", seek.res, seek.err, tc.want)
			}
			if stream.err == nil || seek.err.Error() != stream.err.Error() {
				t.Fatalf("by the table: %v\nas a stream:  %v", seek.err, stream.err)
			}
		})
	}
}

// readAtCounter is a file in memory that counts the bytes read with ReadAt.
type readAtCounter struct {
	*bytes.Reader
	n atomic.Int64
}

func (r *readAtCounter) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.Reader.ReadAt(p, off)
	r.n.Add(int64(n))
	return n, err
}

// TestSeekZstdDefers: read by its seek table, an archive's large blobs are
// written side by side, each decoding its own frames; blobs smaller than a
// few frames are read in order by the walk, so that a frame holding many of
// them is decoded once, not once per blob.
func TestSeekZstdDefers(t *testing.T) {
	tarb, _, _ := seekZstdImage(t)
	fs := fixture.ZstdFramesOf(tarb, 64<<10)
	in := append(fixture.ConcatZstd(fs), fixture.SeekTableOf(fs)...)
	st := newOverlapStore(10 * time.Second)
	if _, err := walk(t.Context(), bytes.NewReader(in), st, WalkOptions{}, smallLimits()); err != nil {
		t.Fatal(err)
	}
	if !st.overlapped() {
		t.Fatal("the layers of many frames were not written side by side")
	}

	var layers []blob
	for i := range 40 {
		layers = append(layers, randomLayer(20<<10, uint64(100+i)))
	}
	im := imageWith(t, "amd64", layers...)
	tarb = tarBytes(t, ociEntries("", indexJSON(t, withAnnotations(im.manifest.desc(), annotationContainerdName, "example.com/small:1")), im.blobs()...))
	fs = fixture.ZstdFramesOf(tarb, 64<<10)
	in = append(fixture.ConcatZstd(fs), fixture.SeekTableOf(fs)...)
	f := &readAtCounter{Reader: bytes.NewReader(in)}
	ms := newMemStore()
	res, err := walk(t.Context(), f, ms, WalkOptions{}, smallLimits())
	if err != nil || len(res.Images) != 1 {
		t.Fatalf("%v, %v", res, err)
	}
	for _, l := range layers {
		if !bytes.Equal(ms.blobs[l.digest()], l.data) {
			t.Fatalf("layer %s not written", l.digest())
		}
	}
	if n := f.n.Load(); n > int64(len(in))*3/2 {
		t.Fatalf("read %d bytes of a file of %d to walk it: frames decoded once per small blob", n, len(in))
	}
}

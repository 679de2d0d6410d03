package archive

// Writing an OCI image layout as a tar that every reader takes: containerd
// and K3s read its index.json (an oci-layout file is there), docker-save
// readers its manifest.json, holdfast both. The bytes depend only on what is
// written: entries in a fixed order, a fixed mtime, owner and modes, no user
// names, JSON with sorted keys and no spacing.

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Layout is an OCI image layout to write as a tar.
type Layout struct {
	// Index is index.json's entries, written in this order: each image
	// name's target, and the signature manifests beside them.
	Index []ocispec.Descriptor
	// DockerSave is manifest.json's entries; none writes no manifest.json.
	DockerSave []DockerSaveEntry
	// Blobs are written under blobs/<alg>/<hex>, each once, sorted by
	// digest whatever their order here.
	Blobs []LayoutBlob
}

// DockerSaveEntry is one image of a docker save manifest.json: its config
// and layers (written as blob paths) and its tags.
type DockerSaveEntry struct {
	Config   digest.Digest
	RepoTags []string
	Layers   []digest.Digest
}

// LayoutBlob is a blob to write: its descriptor, and how to read it. The
// bytes read must be Desc.Size long and have Desc.Digest, or the write
// fails.
type LayoutBlob struct {
	Desc ocispec.Descriptor
	Open func(ctx context.Context) (io.ReadCloser, error)
}

// LayoutStats count what WriteLayout wrote.
type LayoutStats struct {
	Blobs     int
	BlobBytes int64 // the blobs' bytes
	TarBytes  int64 // the whole tar, uncompressed
}

// layoutEpoch is every entry's mtime: the Unix epoch, so that the same
// content gives the same bytes.
var layoutEpoch = time.Unix(0, 0).UTC()

// Modes of what a written layout holds.
const (
	layoutFileMode = 0o644
	layoutDirMode  = 0o755
)

// WriteLayout writes l to w as a tar: oci-layout, index.json and
// manifest.json first (a reader learns the images before their blobs), then
// the blobs/ directories, then each blob once, by digest.
func WriteLayout(ctx context.Context, w io.Writer, l Layout) (LayoutStats, error) {
	var st LayoutStats
	if len(l.Index) == 0 {
		return st, errors.New("writing a layout: no image to write")
	}
	blobs, err := sortedBlobs(l.Blobs)
	if err != nil {
		return st, err
	}
	meta, err := layoutMeta(l)
	if err != nil {
		return st, err
	}
	cw := &CountingWriter{W: w}
	tw := tar.NewWriter(cw)
	for _, m := range meta {
		if err := writeLayoutFile(tw, m.name, m.data); err != nil {
			return st, err
		}
	}
	algs := map[string]bool{}
	for _, b := range blobs {
		algs[b.Desc.Digest.Algorithm().String()] = true
	}
	dirs := []string{ocispec.ImageBlobsDir + "/"}
	for _, a := range slices.Sorted(maps.Keys(algs)) {
		dirs = append(dirs, ocispec.ImageBlobsDir+"/"+a+"/")
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(layoutHeader(d, tar.TypeDir, layoutDirMode, 0)); err != nil {
			return st, fmt.Errorf("writing %s: %w", d, err)
		}
	}
	buf := make([]byte, aheadBlockSize)
	for _, b := range blobs {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		if err := writeLayoutBlob(ctx, tw, b, buf); err != nil {
			return st, err
		}
		st.Blobs++
		st.BlobBytes += b.Desc.Size
	}
	if err := tw.Close(); err != nil {
		return st, fmt.Errorf("ending the tar: %w", err)
	}
	st.TarBytes = cw.N
	return st, nil
}

// sortedBlobs checks the blobs and returns them by digest, each once; a
// digest given twice with two sizes is an error.
func sortedBlobs(in []LayoutBlob) ([]LayoutBlob, error) {
	out := slices.Clone(in)
	for _, b := range out {
		if err := b.Desc.Digest.Validate(); err != nil {
			return nil, fmt.Errorf("writing a layout: blob %q: %w", b.Desc.Digest, err)
		}
		if b.Desc.Size < 0 || b.Open == nil {
			return nil, fmt.Errorf("writing a layout: blob %s has no size or no reader", b.Desc.Digest)
		}
	}
	slices.SortStableFunc(out, func(a, b LayoutBlob) int { return strings.Compare(string(a.Desc.Digest), string(b.Desc.Digest)) })
	for i := 1; i < len(out); i++ {
		if out[i].Desc.Digest == out[i-1].Desc.Digest && out[i].Desc.Size != out[i-1].Desc.Size {
			return nil, fmt.Errorf("writing a layout: blob %s is given as %d and as %d bytes", out[i].Desc.Digest, out[i-1].Desc.Size, out[i].Desc.Size)
		}
	}
	return slices.CompactFunc(out, func(a, b LayoutBlob) bool { return a.Desc.Digest == b.Desc.Digest }), nil
}

type layoutFile struct {
	name string
	data []byte
}

// layoutMeta is oci-layout, index.json and manifest.json (when there are
// docker save entries), encoded.
func layoutMeta(l Layout) ([]layoutFile, error) {
	layout, err := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err != nil {
		return nil, err
	}
	index, err := json.Marshal(ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: l.Index,
	})
	if err != nil {
		return nil, fmt.Errorf("encoding index.json: %w", err)
	}
	out := []layoutFile{{ocispec.ImageLayoutFile, layout}, {ocispec.ImageIndexFile, index}}
	if len(l.DockerSave) == 0 {
		return out, nil
	}
	entries := make([]dockerImage, 0, len(l.DockerSave))
	for _, e := range l.DockerSave {
		if err := e.Config.Validate(); err != nil {
			return nil, fmt.Errorf("manifest.json: config %q: %w", e.Config, err)
		}
		d := dockerImage{Config: BlobPath(e.Config), RepoTags: e.RepoTags, Layers: []string{}}
		if d.RepoTags == nil {
			d.RepoTags = []string{}
		}
		for _, l := range e.Layers {
			if err := l.Validate(); err != nil {
				return nil, fmt.Errorf("manifest.json: layer %q: %w", l, err)
			}
			d.Layers = append(d.Layers, BlobPath(l))
		}
		entries = append(entries, d)
	}
	manifest, err := json.Marshal(entries)
	if err != nil {
		return nil, fmt.Errorf("encoding manifest.json: %w", err)
	}
	return append(out, layoutFile{nameManifestJSON, manifest}), nil
}

// BlobPath is where a layout keeps the blob d: blobs/<alg>/<hex>.
func BlobPath(d digest.Digest) string {
	return path.Join(ocispec.ImageBlobsDir, d.Algorithm().String(), d.Encoded())
}

// layoutHeader is a tar header that says nothing of who wrote it or when:
// owner 0, no user or group names, the epoch as mtime, a fixed mode.
func layoutHeader(name string, typ byte, mode int64, size int64) *tar.Header {
	return &tar.Header{
		Typeflag: typ,
		Name:     name,
		Mode:     mode,
		Size:     size,
		ModTime:  layoutEpoch,
		Format:   tar.FormatPAX,
	}
}

func writeLayoutFile(tw *tar.Writer, name string, data []byte) error {
	if err := tw.WriteHeader(layoutHeader(name, tar.TypeReg, layoutFileMode, int64(len(data)))); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if _, err := tw.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

// writeLayoutBlob copies one blob into the tar, checking its size and
// digest as it goes: a blob the store holds damaged is an error, not an
// archive no reader takes.
func writeLayoutBlob(ctx context.Context, tw *tar.Writer, b LayoutBlob, buf []byte) error {
	name := BlobPath(b.Desc.Digest)
	rc, err := b.Open(ctx)
	if err != nil {
		return fmt.Errorf("reading blob %s: %w", b.Desc.Digest, err)
	}
	err = copyLayoutBlob(tw, name, b.Desc, rc, buf)
	if cerr := rc.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("reading blob %s: %w", b.Desc.Digest, cerr)
	}
	return err
}

// copyLayoutBlob writes the blob desc, read from r, into tw, through buf
// (aheadBlockSize bytes). A blob larger than buf is read by a goroutine
// ahead of the copy (aheadReader), in reads of aheadBlockSize (each a round
// trip to containerd), and hashed there, while this one writes into tw what
// was read before: reading and hashing, and the tar and the compression
// behind it, each keep a core busy.
func copyLayoutBlob(tw *tar.Writer, name string, desc ocispec.Descriptor, r io.Reader, buf []byte) error {
	if err := tw.WriteHeader(layoutHeader(name, tar.TypeReg, layoutFileMode, desc.Size)); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	h := desc.Digest.Algorithm().Hash()
	var n int64
	var err error
	if desc.Size < int64(len(buf)) {
		n, err = io.CopyBuffer(io.MultiWriter(tw, h), io.LimitReader(r, desc.Size+1), buf)
	} else {
		ahead := newAheadReader(io.TeeReader(io.LimitReader(r, desc.Size+1), h))
		n, err = io.CopyBuffer(tw, ahead, buf)
		// Close waits for the goroutine: h has all it read.
		ahead.Close()
	}
	switch {
	case errors.Is(err, tar.ErrWriteTooLong) || n > desc.Size:
		return fmt.Errorf("blob %s is longer than its %d bytes", desc.Digest, desc.Size)
	case err != nil:
		return fmt.Errorf("copying blob %s: %w", desc.Digest, err)
	case n < desc.Size:
		return fmt.Errorf("blob %s is %d bytes, its descriptor says %d", desc.Digest, n, desc.Size)
	}
	if got := digest.NewDigest(desc.Digest.Algorithm(), h); got != desc.Digest {
		return fmt.Errorf("blob %s read from the store has digest %s", desc.Digest, got)
	}
	return nil
}

// CountingWriter counts the bytes written through it to W in N.
type CountingWriter struct {
	W io.Writer
	N int64
}

func (c *CountingWriter) Write(p []byte) (int, error) {
	n, err := c.W.Write(p)
	c.N += int64(n)
	return n, err
}

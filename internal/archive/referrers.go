package archive

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/files"
	"github.com/holdfast-project/holdfast/internal/oci"
)

// A layout may hold referrers its index.json does not list: cosign save
// rewrites index.json on each write, so the sigstore bundle referrer cosign
// v3 signs an image with (an OCI 1.1 manifest whose subject is the image)
// is left in blobs/ unlisted. The walk finds them by their subject.

// reasonReferrer is why a referrer is skipped, listed or not.
const reasonReferrer = "referrer"

// addUnlistedReferrers adds to w.skipped, as referrers, the manifests the
// walk holds that index.json does not list (directly or through an index)
// and whose subject is one of the archive's images (an index.json target or
// a manifest of one): among its documents, and the blobs of a layout dir
// that nothing reached (w.extra), those of at most lim.scanSize bytes (in a
// tar as in a dir). Each is parsed once, and only when it mentions a
// subject at all; they are added sorted by digest.
func (w *walker) addUnlistedReferrers() {
	if len(w.images) == 0 {
		return
	}
	var found []Skipped
	for _, docs := range []map[digest.Digest][]byte{w.docs, w.extra} {
		for d, b := range docs {
			if w.listed[d] || w.images[d] || int64(len(b)) > w.lim.scanSize {
				continue
			}
			if s, ok := referrerOf(d, b, w.images); ok {
				found = append(found, s)
			}
		}
	}
	slices.SortFunc(found, func(a, b Skipped) int { return cmp.Compare(a.Digest, b.Digest) })
	w.skipped = append(w.skipped, found...)
}

// subjectKey is how a manifest with a subject begins to say so.
var subjectKey = []byte(`"subject"`)

// referrerOf says whether the document b (digest d) is a manifest whose
// subject is one of images, and describes it as a skipped entry.
func referrerOf(d digest.Digest, b []byte, images map[digest.Digest]bool) (Skipped, bool) {
	if !bytes.Contains(b, subjectKey) {
		return Skipped{}, false
	}
	var m struct {
		MediaType string              `json:"mediaType"`
		Config    *ocispec.Descriptor `json:"config"`
		Subject   *ocispec.Descriptor `json:"subject"`
	}
	if json.Unmarshal(b, &m) != nil || m.Subject == nil || !images[m.Subject.Digest] {
		return Skipped{}, false
	}
	switch {
	case oci.IsManifest(m.MediaType):
	case m.MediaType == "" && m.Config != nil:
		m.MediaType = ocispec.MediaTypeImageManifest
	default:
		return Skipped{}, false
	}
	return Skipped{Digest: d, MediaType: m.MediaType, Size: int64(len(b)), Reason: reasonReferrer}, true
}

// scan reads the blobs of the layout dir that nothing reached, so that
// finish finds the referrers among them: every regular file of
// blobs/<alg>/ not seen yet, named by a valid digest, of at most
// lim.scanSize bytes and that starts as JSON, read once into w.extra (and
// checked against its digest). Files that are not (a symlink, a larger
// file, garbage, a name that is no digest) are passed over, never
// followed or read further. Each file looked at counts as an entry.
func (dw *dirWalker) scan(ctx context.Context) error {
	w := dw.w
	w.extra = make(map[digest.Digest][]byte)
	algs, err := dw.readDir(blobsDir)
	if err != nil || algs == nil {
		return err
	}
	defer algs.Close()
	for {
		es, err := algs.ReadDir(256)
		for _, e := range es {
			if !e.IsDir() {
				continue
			}
			if err := dw.scanAlg(ctx, path.Join(blobsDir, e.Name())); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("listing %s: %w", blobsDir, err)
		}
	}
}

// blobsDir holds a layout's blobs/<alg>/<hex>.
const blobsDir = "blobs"

// scanAlg is scan of one directory blobs/<alg>, read a batch of names at a
// time.
func (dw *dirWalker) scanAlg(ctx context.Context, dir string) error {
	f, err := dw.readDir(dir)
	if err != nil || f == nil {
		return err
	}
	defer f.Close()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		es, err := f.ReadDir(1024)
		for _, e := range es {
			if serr := dw.scanFile(dir, e); serr != nil {
				return serr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("listing %s: %w", dir, err)
		}
	}
}

// scanFile is scan of one entry e of dir.
func (dw *dirWalker) scanFile(dir string, e fs.DirEntry) error {
	w := dw.w
	name := path.Join(dir, e.Name())
	d, ok := blobDigest(name)
	if !ok || dw.seen[d] || !e.Type().IsRegular() {
		return nil
	}
	if _, ok := w.extra[d]; ok {
		return nil
	}
	w.entries++
	if w.entries > w.lim.entries {
		return fmt.Errorf("layout holds more than %d blobs", w.lim.entries)
	}
	info, err := e.Info()
	if err != nil || info.Size() == 0 || info.Size() > w.lim.scanSize || !info.Mode().IsRegular() {
		return nil // gone since it was listed, or no referrer
	}
	b, err := dw.readSame(name, info)
	if err != nil || b == nil {
		return err
	}
	if !isJSON(b) || d.Algorithm().FromBytes(b) != d {
		return nil
	}
	if err := w.addDocBytes(name, int64(len(b))); err != nil {
		return err
	}
	w.extra[d] = b
	return nil
}

// readSame reads the file name if it is still the regular file info
// describes (lstat: a symlink put in its place is not followed) and its
// first bytes may be JSON; else it returns nil.
func (dw *dirWalker) readSame(name string, info fs.FileInfo) ([]byte, error) {
	f, err := files.OpenIn(dw.root, name)
	if err != nil {
		return nil, nil // gone, or no longer a regular file
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !os.SameFile(info, st) {
		return nil, nil
	}
	cr := &countingReader{r: f}
	defer func() { dw.n += cr.n }()
	head, err := readHead(cr, info.Size())
	if err != nil || !mayBeJSON(head) {
		return nil, nil
	}
	rest, err := readN(cr, info.Size()-int64(len(head)))
	if err != nil {
		return nil, nil // changed while read: no referrer of ours
	}
	return append(head, rest...), nil
}

// readDir opens the directory name under the layout dir if it is one (not
// a symlink to one); nil when it is missing or something else.
func (dw *dirWalker) readDir(name string) (*os.File, error) {
	info, err := dw.root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) || err == nil && !info.IsDir() {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	f, err := dw.root.Open(name)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if st, err := f.Stat(); err != nil || !os.SameFile(info, st) {
		f.Close()
		return nil, nil
	}
	return f, nil
}

// fetchReferrers takes in the referrers finish found among the blobs scan
// read, as the index entries a walk skips are taken in: the manifest, then
// what it refers to (the bundle, its config). The blobs scan read and
// nothing needs are dropped.
func (dw *dirWalker) fetchReferrers(ctx context.Context, skipped []Skipped) error {
	for _, s := range skipped {
		if _, ok := dw.w.extra[s.Digest]; !ok {
			continue
		}
		if err := dw.fetch(ctx, s.Digest, 0); err != nil {
			return err
		}
	}
	for _, b := range dw.w.extra {
		dw.w.docBytes -= int64(len(b))
	}
	dw.w.extra = nil
	return nil
}

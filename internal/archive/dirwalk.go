package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/files"
)

// walkDir is WalkDirWith with chosen limits (tests use small ones).
func walkDir(ctx context.Context, dir string, st Store, opts WalkOptions, lim limits) (*Result, error) {
	// Every file is opened through root: a symlink (or a name) that leads out
	// of the layout dir is an error, never a read of what it points to.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("opening layout dir: %w", err)
	}
	defer root.Close()
	w := newWalker(st, lim, opts.concurrency())
	w.name = opts.Name
	w.deferred = w.concurrency > 1
	var n int64
	for _, name := range []string{nameOCILayout, nameIndexJSON, nameManifestJSON} {
		b, err := readFileLimit(root, name, lim.metaSize)
		if errors.Is(err, fs.ErrNotExist) {
			if name == nameManifestJSON || name == nameOCILayout && hasBlobsDir(root) {
				continue // a store saved for containerd (hauler --containerd) has no oci-layout
			}
			return nil, fmt.Errorf("%w: no %s in the directory", ErrNotImage, name)
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		n += int64(len(b))
		w.meta[name] = b
	}
	dw := &dirWalker{w: w, root: root, seen: make(map[digest.Digest]bool)}
	var idx ocispec.Index
	if err := json.Unmarshal(w.meta[nameIndexJSON], &idx); err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	for _, d := range idx.Manifests {
		if skipKind(entryKind(d)) != "" && !opts.ReadSkipped {
			continue // a signature, attestation, SBOM or referrer: not read
		}
		if err := dw.fetch(ctx, d.Digest, 0); err != nil {
			return nil, err
		}
	}
	if b, ok := w.meta[nameManifestJSON]; ok {
		var entries []dockerImage
		if err := json.Unmarshal(b, &entries); err != nil {
			return nil, fmt.Errorf("manifest.json: %w", err)
		}
		for _, e := range entries {
			for _, p := range append([]string{e.Config}, e.Layers...) {
				if d, ok := blobDigest(cleanName(p)); ok {
					if err := dw.fetch(ctx, d, w.lim.depth); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	if opts.ReadSkipped {
		// Referrers index.json does not list (cosign v3's, saved by
		// cosign save) are found among the blobs nothing reached.
		if err := dw.scan(ctx); err != nil {
			return nil, err
		}
	}
	if err := w.runJobs(ctx); err != nil {
		return nil, err
	}
	res, err := w.finish(ctx)
	if err != nil {
		return nil, err
	}
	if err := dw.fetchReferrers(ctx, res.Skipped); err != nil {
		return nil, err
	}
	if err := w.runJobs(ctx); err != nil {
		return nil, err
	}
	res.Compression = None
	res.BytesRead = n + dw.n + w.jobRead
	return res, nil
}

// hasBlobsDir says whether root holds a blobs directory.
func hasBlobsDir(root *os.Root) bool {
	fi, err := root.Stat("blobs")
	return err == nil && fi.IsDir()
}

// readFileLimit reads the file called name under root, of at most limit
// bytes: a larger one is an error that gives the bound.
func readFileLimit(root *os.Root, name string, limit int64) ([]byte, error) {
	f, err := files.OpenIn(root, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := files.ReadAll(f, limit)
	if errors.Is(err, files.ErrTooLarge) {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, err
}

// dirWalker follows the references of a layout directory's index.json (and
// manifest.json), giving each blob it reaches to the walker once.
type dirWalker struct {
	w    *walker
	root *os.Root // the layout dir
	seen map[digest.Digest]bool
	n    int64 // bytes read from blob files
}

// fetch takes in the blob d from the layout's blobs directory and, if it is an
// index or a manifest, the blobs it refers to. A blob that is not there is
// skipped: partial layouts are the caller's business.
func (dw *dirWalker) fetch(ctx context.Context, d digest.Digest, depth int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d.Validate() != nil || dw.seen[d] {
		return nil // finish reports invalid digests
	}
	dw.seen[d] = true
	w := dw.w
	if err := dw.take(ctx, d); err != nil {
		return err
	}
	b, ok := w.docs[d]
	if !ok || depth >= w.lim.depth {
		return nil
	}
	var refs struct {
		Manifests []ocispec.Descriptor `json:"manifests"`
		Config    *ocispec.Descriptor  `json:"config"`
		Layers    []ocispec.Descriptor `json:"layers"`
	}
	if json.Unmarshal(b, &refs) != nil {
		return nil // finish reports documents that do not parse
	}
	if refs.Config != nil {
		if err := dw.fetch(ctx, refs.Config.Digest, w.lim.depth); err != nil {
			return err
		}
	}
	for _, c := range refs.Layers {
		if err := dw.fetch(ctx, c.Digest, w.lim.depth); err != nil {
			return err
		}
	}
	for _, c := range refs.Manifests {
		if err := dw.fetch(ctx, c.Digest, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// take gives the blob d to the walker, read from its file, or from what
// scan read of it.
func (dw *dirWalker) take(ctx context.Context, d digest.Digest) error {
	w := dw.w
	name := blobName(d)
	if b, ok := w.extra[d]; ok {
		// A JSON document scan read, checked against its digest and
		// counted as an entry and as document bytes.
		delete(w.extra, d)
		w.docs[d] = b
		w.files[name] = &fileInfo{dgst: d, size: int64(len(b)), named: true, doc: true, comp: None}
		return nil
	}
	w.entries++
	if w.entries > w.lim.entries {
		return fmt.Errorf("layout refers to more than %d blobs", w.lim.entries)
	}
	f, err := files.OpenIn(dw.root, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("reading %s: %w", name, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", name)
	}
	cr := &countingReader{r: f}
	var again reopener
	if w.deferred {
		again = rootOpener(dw.root, name)
	}
	err = w.digestBlob(ctx, name, d, st.Size(), cr, again)
	dw.n += cr.n
	return err
}

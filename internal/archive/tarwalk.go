package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/opencontainers/go-digest"
)

// walk is WalkWith with chosen limits (tests use small ones). It reads the tar
// stream entry by entry, handing each to the walker, checks the stream ends
// as a tar archive should, then runs the writes it deferred and resolves the
// images.
func walk(ctx context.Context, r io.Reader, st Store, opts WalkOptions, lim limits) (*Result, error) {
	in, err := openInput(r, lim, opts.concurrency() > 1)
	if err != nil {
		return nil, err
	}
	defer in.close()
	c := in.comp

	tr := tar.NewReader(in.tar)
	w := newWalker(st, lim, opts.concurrency())
	w.name = opts.Name
	w.deferred = in.seekable && w.concurrency > 1 && in.reopens()
	first := true
	var prev string   // the entry before: when seekable, Next seeks past its data
	var prevEnd int64 // where its data ends
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		mark := in.reads.n
		hdr, err := tr.Next()
		if err == io.EOF {
			if first && in.reads.n == 0 {
				return nil, notTar(c, errors.New("empty stream"))
			}
			// Next reports io.EOF both after the zero block that ends an
			// archive and when the stream stops right after an entry. The
			// rest of the previous entry was read before Next (or seeked
			// over, reading at most a byte of it and of its padding), so in
			// this call Next read less than a block, then a zero block if
			// there was one.
			if in.reads.n-mark < blockSize {
				return nil, errors.New("tar stream ends without an end-of-archive marker (truncated?)")
			}
			break
		}
		if err != nil {
			if first && in.decodeErr() == nil {
				return nil, notTar(c, err)
			}
			if in.seekable && errors.Is(err, io.ErrUnexpectedEOF) && in.endsBefore(prevEnd) {
				return nil, fmt.Errorf("reading %s: %w", prev, err)
			}
			return nil, in.streamErr(fmt.Errorf("reading tar: %w", err))
		}
		first = false
		var again reopener
		if in.seekable {
			// The tar reader reads nothing ahead: the entry's data starts here.
			prev, prevEnd = cleanName(hdr.Name), in.sc.pos+hdr.Size
			if w.deferred {
				again = in.reopen(in.sc.pos, hdr.Size)
			}
		}
		if err := w.entry(ctx, hdr, tr, again); err != nil {
			return nil, in.streamErr(err)
		}
		if !in.seekable {
			// Read what the entry handler left (skipped blobs) here, so that
			// Next reads only headers; see above.
			if _, err := io.Copy(io.Discard, tr); err != nil {
				return nil, in.streamErr(fmt.Errorf("reading %s: %w", cleanName(hdr.Name), err))
			}
		}
	}
	n, err := in.finish()
	if err != nil {
		return nil, in.streamErr(err)
	}
	if w.deferred {
		w.queueHeldLayers()
		if err := w.runJobs(ctx); err != nil {
			return nil, in.writeErr(err)
		}
	}
	if err := in.verify(ctx); err != nil {
		return nil, err
	}
	res, err := w.finish(ctx)
	if err != nil {
		return nil, err
	}
	// Held layers of images only manifest.json names (Docker ≥ 25).
	if err := w.runJobs(ctx); err != nil {
		return nil, err
	}
	res.Compression = c
	res.BytesRead = n
	return res, nil
}

// notTar wraps ErrNotTar with the cause, naming the compression if any.
func notTar(c Compression, cause error) error {
	if c == None {
		return fmt.Errorf("%w: %w", ErrNotTar, cause)
	}
	return fmt.Errorf("%w (%s-compressed): %w", ErrNotTar, c, cause)
}

// entry takes in one tar entry, read from r. again, when the walker defers
// writes, reads the entry's data again later.
func (w *walker) entry(ctx context.Context, hdr *tar.Header, r io.Reader, again reopener) error {
	w.entries++
	if w.entries > w.lim.entries {
		return fmt.Errorf("archive has more than %d entries", w.lim.entries)
	}
	if len(hdr.Name) > w.lim.nameLen || len(hdr.Linkname) > w.lim.nameLen {
		return fmt.Errorf("entry name %.64q… is longer than %d bytes", hdr.Name, w.lim.nameLen)
	}
	if err := checkEntryName(hdr.Name); err != nil {
		return err
	}
	name := cleanName(hdr.Name)
	if isSparse(hdr) {
		// Its holes read as zeros, as many as the header cares to claim: no
		// image archive writer makes them.
		return fmt.Errorf("%s: sparse tar entries are not supported", name)
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeSymlink, tar.TypeLink:
		// A name given twice: which of the two is meant is anyone's guess.
		_, isFile := w.files[name]
		_, isLink := w.links[name]
		_, isMeta := w.meta[name]
		if isFile || isLink || isMeta {
			return fmt.Errorf("entry %s appears twice in the archive", name)
		}
	}
	switch hdr.Typeflag {
	case tar.TypeReg:
	case tar.TypeSymlink, tar.TypeLink:
		return w.link(name, hdr)
	default:
		return nil // directories, devices, …: nothing an image needs
	}
	if hdr.Size < 0 {
		return fmt.Errorf("%s: negative size %d", name, hdr.Size)
	}
	w.regular++
	switch name {
	case zarfBundleSig:
		if !w.inZarf {
			break
		}
		b, err := w.readMeta(name, hdr.Size, r)
		if err != nil {
			return err
		}
		w.zarf.bundleSig = b
		return nil
	case zarfYAML, zarfChecksums:
		// A Zarf package, sorted as zarf writes it: checksums.txt first.
		b, err := w.readMeta(name, hdr.Size, r)
		if err != nil {
			return err
		}
		if name == zarfYAML {
			w.zarf.yaml = b
		} else {
			w.zarf.checksums = b
		}
		w.inZarf = w.inZarf || w.regular == 1
		return nil
	}
	if w.inZarf {
		rest, ok := strings.CutPrefix(name, zarfImages)
		if !ok {
			return nil // the package's charts, manifests, files, SBOMs: no images
		}
		name = rest
	}
	switch name {
	case nameManifestJSON, nameIndexJSON, nameOCILayout, nameRepositories:
		b, err := w.readMeta(name, hdr.Size, r)
		if err != nil {
			return err
		}
		if w.inZarf {
			sum := sha256.Sum256(b)
			w.zarf.sums[zarfImages+name] = hex.EncodeToString(sum[:])
		}
		w.meta[name] = b
		return nil
	}
	if d, ok := blobDigest(name); ok {
		return w.digestBlob(ctx, name, d, hdr.Size, r, again)
	}
	return w.otherFile(ctx, name, hdr.Size, r, again)
}

// link records the symlink or hard link entry name, refusing one that points
// outside the archive.
func (w *walker) link(name string, hdr *tar.Header) error {
	if hdr.Typeflag == tar.TypeLink {
		if path.IsAbs(hdr.Linkname) || escapes(hdr.Linkname) {
			return fmt.Errorf("hardlink %s points outside the archive (%q)", name, hdr.Linkname)
		}
		w.links[name] = cleanName(hdr.Linkname)
		return nil
	}
	target := hdr.Linkname
	if !path.IsAbs(target) {
		target = path.Join(path.Dir(name), target)
	}
	if path.IsAbs(hdr.Linkname) || escapes(target) {
		return fmt.Errorf("symlink %s points outside the archive (%q)", name, hdr.Linkname)
	}
	w.links[name] = cleanName(target)
	return nil
}

// readMeta reads a small file that describes the archive.
func (w *walker) readMeta(name string, size int64, r io.Reader) ([]byte, error) {
	if size > w.lim.metaSize {
		return nil, fmt.Errorf("%s: %d bytes is too large (limit %d)", name, size, w.lim.metaSize)
	}
	b, err := readN(r, size)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return b, nil
}

// checkEntryName refuses names no image writer makes: absolute ones and
// ones with a ".." element. The walker extracts nothing, but such a name says
// the archive was made to be extracted somewhere it should not be.
func checkEntryName(name string) error {
	if path.IsAbs(name) {
		return fmt.Errorf("entry name %.256q is absolute", name)
	}
	for _, el := range strings.Split(name, "/") {
		if el == ".." {
			return fmt.Errorf("entry name %.256q has a \"..\" element", name)
		}
	}
	return nil
}

// escapes reports whether a relative link target, taken from the archive's
// root, leads out of it.
func escapes(target string) bool {
	c := path.Clean(target)
	return c == ".." || strings.HasPrefix(c, "../")
}

// isSparse reports whether hdr is a GNU sparse file (old GNU or PAX format).
func isSparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// otherFile takes in an entry not named by digest (docker save): small ones
// are held until the end, when manifest.json tells configs and layers from
// the rest; large ones go to the store, which computes their digest. With
// again (deferred writes) those writes are queued.
func (w *walker) otherFile(ctx context.Context, name string, size int64, r io.Reader, again reopener) error {
	if size <= w.lim.docSize {
		b, err := readN(r, size)
		if err != nil {
			return fmt.Errorf("reading %s: %w", name, err)
		}
		fi := &fileInfo{dgst: digest.FromBytes(b), size: size, comp: Sniff(b), data: b}
		if isJSON(b) {
			if err := w.addDocBytes(name, size); err != nil {
				return err
			}
			fi.doc, fi.comp = true, None
		} else if w.heldBytes+size <= w.lim.heldBytes {
			w.heldBytes += size
		} else {
			// Too much held already: write it now, layer or not.
			if again != nil {
				w.queue(&blobJob{name: name, dgst: fi.dgst, size: size, rest: again})
			} else if err := w.put(ctx, name, fi.dgst, size, bytes.NewReader(b)); err != nil {
				return err
			}
			fi.data, fi.stored = nil, true
		}
		w.files[name] = fi
		return nil
	}
	head, err := readHead(r, size)
	if err != nil {
		return fmt.Errorf("reading %s: %w", name, err)
	}
	if again != nil {
		// The digest is known once the job has run.
		fi := &fileInfo{size: size, comp: Sniff(head), stored: true}
		w.queue(&blobJob{name: name, size: size, head: head, rest: again, fi: fi})
		w.files[name] = fi
		return nil
	}
	d, err := w.st.Put(ctx, "", size, io.MultiReader(bytes.NewReader(head), r))
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := d.Validate(); err != nil {
		return fmt.Errorf("writing %s: store returned digest %q: %w", name, d, err)
	}
	w.blobs[d] = size
	w.files[name] = &fileInfo{dgst: d, size: size, comp: Sniff(head), stored: true}
	return nil
}

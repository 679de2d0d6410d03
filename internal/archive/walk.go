package archive

import (
	"archive/tar"
	"bytes"
	"context"
	_ "crypto/sha256" // digest algorithms used by blobs/<alg>/<hex> names
	_ "crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

var (
	// ErrNotTar is wrapped by the error Walk returns when the stream, once
	// decompressed, is not a tar archive at all.
	ErrNotTar = errors.New("not a tar archive")
	// ErrNotImage is wrapped by the error Walk returns for a tar archive that
	// has neither manifest.json nor index.json.
	ErrNotImage = errors.New("not an image archive")
)

// limits bound what a walk holds in memory, whatever the archive says.
type limits struct {
	docSize    int64 // entries up to this size are read into memory (JSON ones become documents)
	docBytes   int64 // all JSON documents held together
	heldBytes  int64 // small non-JSON entries not named by digest, held until manifest.json says whether they are layers
	entries    int   // tar entries (or blobs of a layout directory)
	nameLen    int   // length of an entry name
	depth      int   // nesting of indexes
	linkHops   int   // symlinks/hardlinks followed to resolve one path
	indexItems int   // descriptors in one index or manifest, images in manifest.json
	zstdWindow uint64
}

func defaultLimits() limits {
	return limits{
		docSize:    8 << 20,
		docBytes:   256 << 20,
		heldBytes:  64 << 20,
		entries:    1 << 17, // each costs ~230 bytes held, twice that at the GC's peak
		nameLen:    4096,
		depth:      8,
		linkHops:   16,
		indexItems: 1 << 16,
		zstdWindow: zstdMaxWindow,
	}
}

// Top-level files that describe an archive rather than hold blobs.
const (
	nameManifestJSON = "manifest.json"
	nameIndexJSON    = "index.json"
	nameOCILayout    = "oci-layout"
	nameRepositories = "repositories"
)

// fileInfo is what the walker remembers of one archive entry (or layout blob).
type fileInfo struct {
	dgst   digest.Digest
	size   int64
	comp   Compression // sniffed from the entry's first bytes
	named  bool        // named blobs/<alg>/<hex>
	doc    bool        // a JSON document: in Docs if named, else held in data
	data   []byte      // bytes held until the end (entries not named by digest)
	stored bool        // in Blobs: given to the store, or already there
}

type walker struct {
	st    Store
	lim   limits
	docs  map[digest.Digest][]byte
	blobs map[digest.Digest]int64
	files map[string]*fileInfo // by cleaned entry name
	links map[string]string    // link entry name → cleaned target name
	meta  map[string][]byte    // manifest.json, index.json, oci-layout, repositories

	docBytes  int64
	heldBytes int64
	entries   int

	// With deferred writes, the walker queues blob writes in jobs and
	// runJobs does them, concurrency at a time, once it has read the
	// archive's headers.
	deferred    bool
	concurrency int
	jobs        []*blobJob
	jobRead     int64 // bytes the jobs read
}

func newWalker(st Store, lim limits, concurrency int) *walker {
	return &walker{
		st:          st,
		lim:         lim,
		concurrency: concurrency,
		docs:        make(map[digest.Digest][]byte),
		blobs:       make(map[digest.Digest]int64),
		files:       make(map[string]*fileInfo),
		links:       make(map[string]string),
		meta:        make(map[string][]byte),
	}
}

// Walk is WalkWith with the default options.
func Walk(ctx context.Context, r io.Reader, st Store) (*Result, error) {
	return WalkWith(ctx, r, st, WalkOptions{})
}

// WalkWith reads an image archive stream once: a docker save (v1.1, v1.2 or
// the go-containerregistry tarball variant), a Docker ≥ 25 hybrid, or an OCI
// image layout tar, plain or compressed. Blobs go to st as they stream by
// (those st already has are skipped: seeked over when r is an uncompressed
// io.ReadSeeker such as an *os.File, read and discarded otherwise); JSON
// documents come back in Result.Docs.
//
// When r is an uncompressed tar that is an io.ReaderAt and an io.Seeker (an
// *os.File), and opts.Concurrency is not 1, WalkWith reads the tar headers
// first, seeking past blob data, then writes the blobs st lacks
// opts.Concurrency at a time, the largest first, each read through its own
// io.SectionReader. The result is the same either way.
//
// An error wraps ErrNotTar when the (decompressed) stream is not a tar at
// all, ErrNotImage when it is a tar without manifest.json or index.json.
// Errors name the entry or digest and the cause, not the archive: the caller
// adds that. The first error stops the other writes; no call to st is still
// running when WalkWith returns.
func WalkWith(ctx context.Context, r io.Reader, st Store, opts WalkOptions) (*Result, error) {
	return walk(ctx, r, st, opts, defaultLimits())
}

func walk(ctx context.Context, r io.Reader, st Store, opts WalkOptions, lim limits) (*Result, error) {
	in, err := openInput(r, lim)
	if err != nil {
		return nil, err
	}
	defer in.close()
	c := in.comp

	tr := tar.NewReader(in.tar)
	w := newWalker(st, lim, opts.concurrency())
	var ra io.ReaderAt
	if in.seekable && w.concurrency > 1 {
		ra, w.deferred = r.(io.ReaderAt)
	}
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
				again = sectionOpener(ra, in.sc.pos, hdr.Size)
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
			return nil, err
		}
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

// maxTrailing is how much decompressed data may follow the end of a tar archive.
const maxTrailing = 16 << 20

// input is the stream the tar reader reads.
type input struct {
	comp     Compression
	tar      io.Reader       // *countingReader, or *seekCounter when seekable
	reads    *countingReader // bytes the tar reader read
	seekable bool            // uncompressed and seekable: the tar reader seeks past skipped entries
	sc       *seekCounter    // when seekable
	raw      *countingReader // compressed input (nil when seekable)
	dec      *decoder        // nil when seekable
	ahead    *aheadReader    // reads dec ahead of the tar reader (nil when seekable)
	rs       io.ReadSeeker   // when seekable
	start    int64           // offset of rs at the start
}

func openInput(r io.Reader, lim limits) (*input, error) {
	if rs, ok := r.(io.ReadSeeker); ok {
		if start, err := rs.Seek(0, io.SeekCurrent); err == nil {
			head := make([]byte, peekSize)
			n, err := io.ReadFull(rs, head)
			if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
				return nil, fmt.Errorf("reading: %w", err)
			}
			if _, err := rs.Seek(start, io.SeekStart); err != nil {
				return nil, fmt.Errorf("seeking: %w", err)
			}
			if Sniff(head[:n]) == None {
				sc := &seekCounter{countingReader: countingReader{r: rs}, s: rs, pos: start}
				return &input{comp: None, tar: sc, reads: &sc.countingReader, seekable: true, sc: sc, rs: rs, start: start}, nil
			}
		}
	}
	raw := &countingReader{r: r}
	rc, c, err := decompress(raw, lim.zstdWindow)
	if err != nil {
		return nil, err
	}
	ahead := newAheadReader(rc)
	reads := &countingReader{r: ahead}
	return &input{comp: c, tar: reads, reads: reads, raw: raw, dec: rc.(*decoder), ahead: ahead}, nil
}

// endsBefore reports whether a seekable input ends before offset off.
func (in *input) endsBefore(off int64) bool {
	end, err := in.rs.Seek(0, io.SeekEnd)
	return err == nil && end < off
}

func (in *input) decodeErr() error {
	if in.ahead == nil {
		return nil
	}
	if err := in.ahead.Err(); err != io.EOF {
		return err
	}
	return nil
}

// streamErr prefers the decoder's own error: when the compressed stream is
// broken, that is the cause, whatever the tar reader or the store made of it.
func (in *input) streamErr(err error) error {
	if e := in.decodeErr(); e != nil {
		return e
	}
	return err
}

// finish reads to the end of the stream, where decompressors check their
// trailers (checksums, sizes), and returns the size of the archive as stored.
//
// What follows the end-of-archive marker is padding (tar writes whole
// records, 10 KiB by default) that a decompressor still has to produce:
// more than maxTrailing of it is refused, so that a small compressed file
// cannot keep a pass decoding gigabytes of nothing.
func (in *input) finish() (int64, error) {
	if in.seekable {
		end, err := in.rs.Seek(0, io.SeekEnd)
		if err != nil {
			return 0, fmt.Errorf("seeking: %w", err)
		}
		return end - in.start, nil
	}
	n, err := io.Copy(io.Discard, io.LimitReader(in.ahead, maxTrailing+1))
	if err != nil {
		return 0, fmt.Errorf("reading past the end of the tar archive: %w", err)
	}
	if n > maxTrailing {
		return 0, fmt.Errorf("more than %d MiB of data after the end of the tar archive", maxTrailing>>20)
	}
	return in.raw.n, nil
}

func (in *input) close() {
	if in.ahead != nil {
		in.ahead.Close()
	}
	if in.dec != nil {
		in.dec.Close()
	}
}

func notTar(c Compression, cause error) error {
	if c == None {
		return fmt.Errorf("%w: %w", ErrNotTar, cause)
	}
	return fmt.Errorf("%w (%s-compressed): %w", ErrNotTar, c, cause)
}

// cleanName turns an entry name into the key the walker uses: no leading "./"
// or "/", no "..", no trailing "/".
func cleanName(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

// blobDigest returns the digest an entry named blobs/<alg>/<hex> holds.
func blobDigest(name string) (digest.Digest, bool) {
	rest, ok := strings.CutPrefix(name, "blobs/")
	if !ok {
		return "", false
	}
	alg, hex, ok := strings.Cut(rest, "/")
	if !ok || strings.Contains(hex, "/") {
		return "", false
	}
	d := digest.NewDigestFromEncoded(digest.Algorithm(alg), hex)
	if d.Validate() != nil {
		return "", false
	}
	return d, true
}

func blobName(d digest.Digest) string {
	return "blobs/" + d.Algorithm().String() + "/" + d.Encoded()
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
	case tar.TypeSymlink:
		target := hdr.Linkname
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(name), target)
		}
		if path.IsAbs(hdr.Linkname) || escapes(target) {
			return fmt.Errorf("symlink %s points outside the archive (%q)", name, hdr.Linkname)
		}
		w.links[name] = cleanName(target)
		return nil
	case tar.TypeLink:
		if path.IsAbs(hdr.Linkname) || escapes(hdr.Linkname) {
			return fmt.Errorf("hardlink %s points outside the archive (%q)", name, hdr.Linkname)
		}
		w.links[name] = cleanName(hdr.Linkname)
		return nil
	default:
		return nil // directories, devices, …: nothing an image needs
	}
	if hdr.Size < 0 {
		return fmt.Errorf("%s: negative size %d", name, hdr.Size)
	}
	switch name {
	case nameManifestJSON, nameIndexJSON, nameOCILayout, nameRepositories:
		if hdr.Size > w.lim.docSize {
			return fmt.Errorf("%s: %d bytes is too large (limit %d)", name, hdr.Size, w.lim.docSize)
		}
		b, err := readN(r, hdr.Size)
		if err != nil {
			return fmt.Errorf("reading %s: %w", name, err)
		}
		w.meta[name] = b
		return nil
	}
	if d, ok := blobDigest(name); ok {
		return w.digestBlob(ctx, name, d, hdr.Size, r, again)
	}
	return w.otherFile(ctx, name, hdr.Size, r, again)
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

// readN reads exactly n bytes. Past 1 MiB it allocates as the bytes arrive,
// so a header that claims more than the stream holds costs no more than that.
func readN(r io.Reader, n int64) ([]byte, error) {
	b := make([]byte, 0, min(n, 1<<20))
	for int64(len(b)) < n {
		if len(b) == cap(b) {
			b = slices.Grow(b, int(min(n, 2*int64(cap(b))))-len(b))
		}
		k, err := r.Read(b[len(b):int(min(int64(cap(b)), n))])
		b = b[:len(b)+k]
		if err == io.EOF {
			if int64(len(b)) < n {
				return nil, io.ErrUnexpectedEOF
			}
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

// isJSON reports whether b looks like a JSON object: its first non-space byte is '{'.
func isJSON(b []byte) bool {
	t := bytes.TrimLeft(b, " \t\r\n")
	return len(t) > 0 && t[0] == '{'
}

func (w *walker) addDocBytes(name string, n int64) error {
	if w.docBytes+n > w.lim.docBytes {
		return fmt.Errorf("%s: JSON documents in the archive exceed %d bytes", name, w.lim.docBytes)
	}
	w.docBytes += n
	return nil
}

// digestBlob takes in an entry whose name gives its digest: small JSON ones
// become documents, other ones go to the store unless it has them. With again
// (deferred writes) they are queued, and read no further than it takes to
// tell their compression and whether they are documents.
func (w *walker) digestBlob(ctx context.Context, name string, d digest.Digest, size int64, r io.Reader, again reopener) error {
	// The same blob a second time (a duplicate entry, or a docker save layer
	// with the same bytes): remember the name, skip the bytes.
	if _, ok := w.docs[d]; ok {
		w.files[name] = &fileInfo{dgst: d, size: size, named: true, doc: true, comp: None}
		return nil
	}
	if prev, ok := w.blobs[d]; ok {
		if prev != size {
			return fmt.Errorf("%s: %d bytes, but %d bytes earlier in the archive", name, size, prev)
		}
		head, err := readHead(r, size)
		if err != nil {
			return fmt.Errorf("reading %s: %w", name, err)
		}
		w.files[name] = &fileInfo{dgst: d, size: size, named: true, stored: true, comp: Sniff(head)}
		return nil
	}
	fi := &fileInfo{dgst: d, size: size, named: true}
	if size <= w.lim.docSize {
		var b []byte
		if again != nil {
			head, err := readHead(r, size)
			if err != nil {
				return fmt.Errorf("reading %s: %w", name, err)
			}
			if !mayBeJSON(head) {
				fi.comp, fi.stored = Sniff(head), true
				w.queue(&blobJob{name: name, dgst: d, size: size, head: head, rest: again})
				w.files[name] = fi
				return nil
			}
			rest, err := readN(r, size-int64(len(head)))
			if err != nil {
				return fmt.Errorf("reading %s: %w", name, err)
			}
			b = append(head, rest...)
		} else {
			var err error
			if b, err = readN(r, size); err != nil {
				return fmt.Errorf("reading %s: %w", name, err)
			}
		}
		if isJSON(b) {
			if got := d.Algorithm().FromBytes(b); got != d {
				return fmt.Errorf("%s: content has digest %s", name, got)
			}
			if err := w.addDocBytes(name, size); err != nil {
				return err
			}
			fi.doc, fi.comp = true, None
			w.docs[d] = b
			w.files[name] = fi
			return nil
		}
		fi.comp = Sniff(b)
		if again != nil {
			// Blank bytes, then not JSON: read it again rather than hold it.
			w.queue(&blobJob{name: name, dgst: d, size: size, rest: again})
		} else if err := w.put(ctx, name, d, size, bytes.NewReader(b)); err != nil {
			return err
		}
		fi.stored = true
		w.files[name] = fi
		return nil
	}
	head, err := readHead(r, size)
	if err != nil {
		return fmt.Errorf("reading %s: %w", name, err)
	}
	fi.comp = Sniff(head)
	if again != nil {
		w.queue(&blobJob{name: name, dgst: d, size: size, check: true, head: head, rest: again})
		fi.stored = true
		w.files[name] = fi
		return nil
	}
	has, err := w.st.Has(ctx, d)
	if err != nil {
		return fmt.Errorf("checking %s: %w", d, err)
	}
	if has {
		w.blobs[d] = size
	} else if err := w.put(ctx, name, d, size, io.MultiReader(bytes.NewReader(head), r)); err != nil {
		return err
	}
	fi.stored = true
	w.files[name] = fi
	return nil
}

// sniffHead is how many bytes of a large blob are read to tell its compression.
const sniffHead = 16

// mayBeJSON reports whether a blob that starts with head may be a JSON object
// (isJSON): head is blank, or its first non-blank byte is '{'.
func mayBeJSON(head []byte) bool {
	t := bytes.TrimLeft(head, " \t\r\n")
	return len(t) == 0 || t[0] == '{'
}

func readHead(r io.Reader, size int64) ([]byte, error) {
	return readN(r, min(size, sniffHead))
}

// put gives a blob of known digest to the store and records it.
func (w *walker) put(ctx context.Context, name string, d digest.Digest, size int64, r io.Reader) error {
	got, err := w.st.Put(ctx, d, size, r)
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if got != "" && got != d {
		return fmt.Errorf("writing %s: store computed digest %s, expected %s", name, got, d)
	}
	w.blobs[d] = size
	return nil
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

// lookup finds the entry a path names, following links.
func (w *walker) lookup(name string) *fileInfo {
	name = cleanName(name)
	for range w.lim.linkHops + 1 {
		if fi, ok := w.files[name]; ok {
			return fi
		}
		target, ok := w.links[name]
		if !ok {
			return nil
		}
		name = target
	}
	return nil
}

type countingReader struct {
	r io.Reader
	n int64
}

// seekCounter counts the bytes read, lets the tar reader seek and knows
// where it is.
type seekCounter struct {
	countingReader
	s   io.Seeker
	pos int64 // offset in s
}

func (c *seekCounter) Read(p []byte) (int, error) {
	n, err := c.countingReader.Read(p)
	c.pos += int64(n)
	return n, err
}

func (c *seekCounter) Seek(offset int64, whence int) (int64, error) {
	pos, err := c.s.Seek(offset, whence)
	if err == nil {
		c.pos = pos
	}
	return pos, err
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// WalkDir is WalkDirWith with the default options.
func WalkDir(ctx context.Context, dir string, st Store) (*Result, error) {
	return WalkDirWith(ctx, dir, st, WalkOptions{})
}

// WalkDirWith reads an OCI image layout directory (oci-layout, index.json,
// blobs/<alg>/<hex>; a manifest.json beside them is used as in a Docker ≥ 25
// archive). It reads only the blobs reachable from index.json (and
// manifest.json); blobs missing from the directory are left to the caller's
// completeness check, as in Walk. Unless opts.Concurrency is 1, it reads the
// documents first, then writes the other blobs opts.Concurrency at a time,
// the largest first.
func WalkDirWith(ctx context.Context, dir string, st Store, opts WalkOptions) (*Result, error) {
	return walkDir(ctx, dir, st, opts, defaultLimits())
}

func walkDir(ctx context.Context, dir string, st Store, opts WalkOptions, lim limits) (*Result, error) {
	// Every file is opened through root: a symlink (or a name) that leads out
	// of the layout dir is an error, never a read of what it points to.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("opening layout dir: %w", err)
	}
	defer root.Close()
	w := newWalker(st, lim, opts.concurrency())
	w.deferred = w.concurrency > 1
	var n int64
	for _, name := range []string{nameOCILayout, nameIndexJSON, nameManifestJSON} {
		b, err := readFileLimit(root, name, lim.docSize)
		if errors.Is(err, fs.ErrNotExist) {
			if name == nameManifestJSON {
				continue
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
	if err := w.runJobs(ctx); err != nil {
		return nil, err
	}
	res, err := w.finish(ctx)
	if err != nil {
		return nil, err
	}
	if err := w.runJobs(ctx); err != nil {
		return nil, err
	}
	res.Compression = None
	res.BytesRead = n + dw.n + w.jobRead
	return res, nil
}

func readFileLimit(root *os.Root, name string, limit int64) ([]byte, error) {
	f, err := openIn(root, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, nil
}

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
	w.entries++
	if w.entries > w.lim.entries {
		return fmt.Errorf("layout refers to more than %d blobs", w.lim.entries)
	}
	name := blobName(d)
	f, err := openIn(dw.root, name)
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
	if err != nil {
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

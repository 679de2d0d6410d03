package archive

import (
	"bytes"
	"context"
	_ "crypto/sha256" // digest algorithms used by blobs/<alg>/<hex> names
	_ "crypto/sha512"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/opencontainers/go-digest"
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
	metaSize   int64 // a file that describes the archive (index.json, manifest.json, oci-layout)
	docBytes   int64 // all JSON documents held together
	heldBytes  int64 // small non-JSON entries not named by digest, held until manifest.json says whether they are layers
	entries    int   // tar entries (or blobs of a layout directory)
	nameLen    int   // length of an entry name
	depth      int   // nesting of indexes
	linkHops   int   // symlinks/hardlinks followed to resolve one path
	indexItems int   // descriptors in one index or manifest, images in manifest.json
	scanSize   int64 // a manifest index.json does not list is taken for a referrer up to this size (a layout dir's unreached blob is read up to it)
	zstdWindow uint64
}

func defaultLimits() limits {
	return limits{
		docSize:    8 << 20,
		metaSize:   32 << 20, // index.json of 65 536 descriptors (indexItems), annotations and all
		docBytes:   256 << 20,
		heldBytes:  64 << 20,
		entries:    1 << 17, // each costs ~230 bytes held, twice that at the GC's peak
		nameLen:    4096,
		depth:      8,
		linkHops:   16,
		indexItems: 1 << 16,
		scanSize:   64 << 10,
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

// walker holds what a walk has seen so far, of a tar stream or of a layout
// directory, and turns it into a Result at the end (finish).
type walker struct {
	st    Store
	lim   limits
	docs  map[digest.Digest][]byte
	blobs map[digest.Digest]int64
	files map[string]*fileInfo // by cleaned entry name
	links map[string]string    // link entry name → cleaned target name
	meta  map[string][]byte    // manifest.json, index.json, oci-layout, repositories

	// zarf holds a Zarf package's zarf.yaml and checksums.txt; inZarf says
	// the stream began with one of them, so the walk reads the layout under
	// images/ as the archive's own and skips the package's other files.
	zarf    zarf
	inZarf  bool
	regular int // regular entries met so far
	// skipped are the index entries that are not images (Skipped).
	skipped []Skipped
	// listed are the digests index.json lists; images those of the images
	// it resolves to, and of the manifests of their indexes; extra the JSON
	// blobs of a layout dir that nothing reached (scanned). They find the
	// referrers the index does not list (addUnlistedReferrers).
	listed, images map[digest.Digest]bool
	extra          map[digest.Digest][]byte
	// name names the images of a layout whose entries carry no name (a
	// cosign layout): WalkOptions.Name.
	name string

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
		listed:      make(map[digest.Digest]bool),
		images:      make(map[digest.Digest]bool),
		zarf:        zarf{sums: make(map[string]string)},
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

// WalkDir is WalkDirWith with the default options.
func WalkDir(ctx context.Context, dir string, st Store) (*Result, error) {
	return WalkDirWith(ctx, dir, st, WalkOptions{})
}

// WalkDirWith reads an OCI image layout directory (oci-layout, index.json,
// blobs/<alg>/<hex>; a manifest.json beside them is used as in a Docker ≥ 25
// archive). It reads only the blobs reachable from index.json (and
// manifest.json), and with opts.ReadSkipped the small JSON blobs nothing
// reached, to find the referrers index.json does not list (a cosign save
// layout's); blobs missing from the directory are left to the caller's
// completeness check, as in Walk. Unless opts.Concurrency is 1, it reads the
// documents first, then writes the other blobs opts.Concurrency at a time,
// the largest first.
func WalkDirWith(ctx context.Context, dir string, st Store, opts WalkOptions) (*Result, error) {
	return walkDir(ctx, dir, st, opts, defaultLimits())
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

// blobName is the name blobDigest reads: blobs/<alg>/<hex>.
func blobName(d digest.Digest) string {
	return "blobs/" + d.Algorithm().String() + "/" + d.Encoded()
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

// addDocBytes counts n more bytes of JSON documents held, refusing the entry
// name once they exceed the limit for all of them.
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

// readHead reads the first sniffHead bytes of an entry of size bytes (all of
// it when it is smaller).
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

// Package archive reads image archives (docker save, Docker ≥25 hybrid, OCI image
// layout as a tar or a directory), plain or compressed, in one pass; blobs of a
// seekable archive are written concurrently after it. It knows nothing of
// containerd: blob bytes go to a Store, documents come back in memory.
package archive

import (
	"context"
	"io"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Format is the layout of an archive.
type Format string

const (
	FormatDockerSave Format = "docker-save"   // manifest.json + <id>/layer.tar or <hash>.tar.gz (v1.1, v1.2, go-containerregistry)
	FormatOCI        Format = "oci"           // oci-layout + index.json + blobs/<alg>/<hex>
	FormatHybrid     Format = "docker-hybrid" // Docker ≥ 25: OCI layout plus manifest.json
	FormatHaul       Format = "hauler-haul"   // hauler store save: an OCI layout whose entries carry a kind
	FormatZarf       Format = "zarf-package"  // zarf package create: zarf.yaml, checksums.txt, an OCI layout under images/
	FormatCosign     Format = "cosign-layout" // cosign save: an OCI layout whose entries carry a kind and no name
)

// Compression is the outer compression of an archive stream or of a layer blob.
type Compression string

const (
	None  Compression = "none"
	Gzip  Compression = "gzip"
	Zstd  Compression = "zstd"
	Bzip2 Compression = "bzip2"
	Xz    Compression = "xz"
	Lz4   Compression = "lz4"
)

// Store receives blob bytes during a walk. Its methods may be called from
// several goroutines at once: a walk of a seekable archive or of a layout
// directory writes up to WalkOptions.Concurrency blobs concurrently. Every call
// has returned when the walk returns.
type Store interface {
	// Has reports whether the store already holds the complete blob.
	Has(ctx context.Context, dgst digest.Digest) (bool, error)
	// Put writes a blob of exactly size bytes read from r. With a non-empty expected
	// digest the store verifies it; with an empty one it computes it. It returns the digest.
	Put(ctx context.Context, expected digest.Digest, size int64, r io.Reader) (digest.Digest, error)
}

// Reserver is a Store that is told what a walk is about to write before it
// writes it, so that it can refuse the whole archive up front (a disk that
// would fill, say). A walk that defers its writes (a seekable uncompressed tar,
// a layout directory) calls Reserve once for the blobs it queued, after asking
// Has about those of known digest and leaving out the ones present, and
// before it writes any of them; an error ends the walk with nothing of those
// written. A walk of a stream (a compressed archive) learns each blob's size
// only as it reaches it: it never calls Reserve, and a Store that cares checks
// each Put as it comes.
type Reserver interface {
	Reserve(ctx context.Context, blobs int, bytes int64) error
}

// Image is one name an archive gives to one target.
type Image struct {
	Name   string             // full, normalised reference: docker.io/library/busybox:1.36
	Target ocispec.Descriptor // an index or a manifest (synthesised for docker save)
	// Recorded is the name as the archive spells it, when that is not Name
	// (a haul's index.docker.io/library/busybox:1.36, a familiar name).
	Recorded string
}

// Result is what one walk found.
type Result struct {
	Format      Format
	Compression Compression
	Images      []Image                  // sorted by Name, then Target digest
	Docs        map[digest.Digest][]byte // JSON documents (indexes, manifests, configs), not given to Store.Put
	Blobs       map[digest.Digest]int64  // other blobs the archive holds, written or already present, with sizes
	BytesRead   int64                    // size of the archive as stored (compressed); bytes of skipped blobs that were seeked over count too
	// Skipped are the index entries that are not images to import: the
	// signatures, attestations, SBOMs, charts and files bundles carry.
	Skipped []Skipped
	// Package is a Zarf package's signature (zarf.bundle.sig) and what it
	// signs (zarf.yaml), when the package is signed. zarf.yaml's
	// aggregateChecksum covers checksums.txt, which covers every file of
	// images/ the walk read (checked): a signature of zarf.yaml vouches for
	// the package's images as the signer packaged them.
	Package *PackageSignature
}

// PackageSignature is a Zarf package's signature and the zarf.yaml it signs.
type PackageSignature struct {
	Manifest []byte // zarf.yaml
	Bundle   []byte // zarf.bundle.sig: a sigstore bundle over Manifest
}

// DefaultConcurrency is the number of blobs a walk writes at once unless
// WalkOptions says otherwise.
const DefaultConcurrency = 4

// WalkOptions tune a walk.
type WalkOptions struct {
	// Concurrency is how many blobs are written to the Store at once when the
	// archive can be read again at any offset: an uncompressed tar given as an
	// io.ReaderAt that is also an io.Seeker (an *os.File), or a layout
	// directory. The walk then reads the tar headers first and writes the blobs
	// afterwards, the largest first. 0 means DefaultConcurrency; 1 writes each
	// blob as the single pass meets it, as with any other input.
	Concurrency int
	// Name names the image of a layout whose index entries carry no name (a
	// cosign save layout): holdfast import --name.
	Name string
	// ReadSkipped makes a walk of a layout directory read the index entries
	// it skips too (signatures, attestations, SBOMs, referrers), so that
	// their documents are in Result.Docs as a tar's walk has them; their
	// other blobs go to the Store. It also looks among the blobs nothing
	// reached for referrers of the layout's images that index.json does not
	// list, as a tar's walk finds them among its documents. A tar's walk
	// reads every blob anyway.
	ReadSkipped bool
}

func (o WalkOptions) concurrency() int {
	if o.Concurrency <= 0 {
		return DefaultConcurrency
	}
	return o.Concurrency
}

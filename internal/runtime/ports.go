package runtime

// The ports of the import and the export: what an import
// (internal/importer) needs of a content store and its leases, and of the
// writer of one import's blobs; and what both read of a content store
// (Content), which is all an export (internal/exporter) needs. A backend
// offers them beside Runtime.

import (
	"context"
	"io"
	"slices"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
)

// Names are, for each blob, the names of the images that hold it.
type Names map[digest.Digest][]string

// Add records that the image name holds the blobs ds.
func (n Names) Add(name string, ds []digest.Digest) {
	for _, d := range ds {
		if !slices.Contains(n[d], name) {
			n[d] = append(n[d], name)
		}
	}
}

// Backend is a runtime whose content an import writes, and an export reads,
// through Store.
type Backend interface {
	Runtime
	ImportStore() Store
}

// Content is what the import and the export read of a content store: which
// blobs it holds, small documents whole (oci.Reader: a blob that is not
// there is oci.ErrNotFound), and any blob as a stream.
type Content interface {
	oci.Reader
	// Has says whether the store holds a blob.
	Has(ctx context.Context, d digest.Digest) (bool, error)
	// OpenBlob streams a blob of any size; the caller closes it. A blob
	// that is not there is an error wrapping oci.ErrNotFound.
	OpenBlob(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error)
	// Platform is the platform whose content an image must have whole.
	Platform() oci.Platform
}

// Store is what an import needs of a content store and its leases.
type Store interface {
	Content
	// Prepare readies the store for the import of req, before it reads its
	// lease (containerd's adapter forgets the records of blobs whose files
	// are gone, so they are written again); its error fails the import.
	Prepare(ctx context.Context, req ImportRequest) error
	// CreateLease makes a lease that never expires, with labels; one that
	// exists is left as it is.
	CreateLease(ctx context.Context, id string, labels map[string]string) error
	// DeleteLease removes a lease, and so what only it held.
	DeleteLease(ctx context.Context, id string) error
	// ReadState reads a lease's state: Complete is false for a lease without
	// one; an error wrapping runtime.ErrNotFound for no lease.
	ReadState(ctx context.Context, id string) (SourceState, error)
	// Intact says whether every blob a complete state needs is in the store.
	Intact(ctx context.Context, st SourceState) (bool, error)
	// AddToLease puts blobs on a lease.
	AddToLease(ctx context.Context, id string, ds []digest.Digest) error
	// LabelSources labels blobs already in the store with where the images
	// that hold them come from (containerd: distribution source labels).
	LabelSources(ctx context.Context, names Names) error
	// Sync makes what the import wrote durable, where the store does not.
	Sync(ctx context.Context) error
	// NewSink starts the writes of one import of source under lease.
	NewSink(lease, source string) Sink
}

// Sink writes the blobs of one import under its lease.
type Sink interface {
	// Has reports whether the store already holds the complete blob
	// (archive.Store).
	Has(ctx context.Context, d digest.Digest) (bool, error)
	// Put writes a blob of exactly size bytes read from r, verified against
	// a non-empty expected digest, else hashed, and returns its digest
	// (archive.Store).
	Put(ctx context.Context, expected digest.Digest, size int64, r io.Reader) (digest.Digest, error)
	// Reserve is told what a walk is about to write (archive.Reserver).
	Reserve(ctx context.Context, blobs int, bytes int64) error
	// ReadPending reads a blob Put holds back to commit later, if it does.
	ReadPending(d digest.Digest) ([]byte, bool, error)
	// CommitPending commits the blobs held back, with the names of the
	// images that hold each, and returns the blobs it committed labelled.
	CommitPending(ctx context.Context, names Names) (map[digest.Digest]bool, error)
	// Committed says whether this import committed a blob (so it is on the
	// lease already).
	Committed(d digest.Digest) bool
	// WriteDoc writes an index, a manifest or another small blob the walk
	// read whole, with the names of the images that hold it; it reports
	// whether this call committed it (else it was there).
	WriteDoc(ctx context.Context, desc ocispec.Descriptor, data []byte, names []string) (bool, error)
	// WriteState records a lease's state (runtime.EncodeState), held by the
	// lease.
	WriteState(ctx context.Context, st SourceState) error
	// Stats are what the import wrote and found.
	Stats() Stats
	// Abandon undoes what a failed import left in flight.
	Abandon(ctx context.Context)
	// Close ends the import's writes, failed or not.
	Close(ctx context.Context)
}

// Stats count the blobs of one import.
type Stats struct {
	Written int // committed by this import
	Present int // found in the store already
	Direct  int // of those written, placed in the store's directory by holdfast
}

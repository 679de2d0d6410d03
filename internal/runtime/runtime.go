// Package runtime is the seam between holdfast and an image store: the Runtime
// interface, the domain types it speaks in, and the labels and lease names that
// make up holdfast's contract with containerd. Only the containerd sub-package
// imports containerd.
package runtime

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
)

// Labels on image records and content, and the lease ID prefix.
const (
	// LabelCRIPinned is what the CRI reports to the kubelet as a pinned image.
	LabelCRIPinned = "io.cri-containerd.pinned"
	// LabelPinned marks holdfast's ownership of a pin: holdfast only unpins records carrying it.
	LabelPinned = "io.holdfast.pinned"
	// LabelPriorPin records that the CRI label was on the record before holdfast pinned it.
	LabelPriorPin = "io.holdfast.prior-pin"
	// LabelCRIManaged is added by the CRI to records it has seen.
	LabelCRIManaged = "io.cri-containerd.image"
	// LabelCreated marks a record holdfast created (its value "true"): under
	// an enforced signature policy holdfast deletes the records it made of
	// an image the policy refuses, and only those.
	LabelCreated = "io.holdfast.created"
	// PinnedValue is the value of both pin labels.
	PinnedValue = "pinned"
	// LabelExpire is containerd's expiry (RFC 3339) of a lease or, on 2.x,
	// of an image record: once past, the GC collects the record unless a
	// lease holds it. holdfast never sets it on a record; the records it pins
	// are held past it (Runtime.Pin).
	LabelExpire = "containerd.io/gc.expire"

	// LeasePrefix starts every lease ID holdfast owns.
	LeasePrefix = "holdfast/"
	// LabelSource and LabelIdentity are set on a source's lease.
	LabelSource   = "io.holdfast.source"
	LabelIdentity = "io.holdfast.identity"
	// LabelState marks the content blob that holds a lease's desired state; its value is the lease ID.
	LabelState = "io.holdfast.state"
	// LabelKept marks the lease of a kept source (holdfast import): it stays
	// until released, whatever becomes of its file. LabelImportedAt is when
	// it was imported (RFC 3339).
	LabelKept       = "io.holdfast.kept"
	LabelImportedAt = "io.holdfast.imported-at"
	// LabelProbe marks a lease that is no source's: it holds the blob that
	// proves the content store's directory (value "content-root").
	LabelProbe = "io.holdfast.probe"
)

// ErrNotFound is returned when a record, lease or blob does not exist: the
// one not-found error of oci, which a blob read wraps too.
var ErrNotFound = oci.ErrNotFound

// Image is an image record in the store.
type Image struct {
	Name   string
	Target ocispec.Descriptor
	Labels map[string]string
}

// Pinned reports whether the CRI sees the record as pinned.
func (i Image) Pinned() bool { return i.Labels[LabelCRIPinned] == PinnedValue }

// Owned reports whether holdfast owns the pin.
func (i Image) Owned() bool { return i.Labels[LabelPinned] == PinnedValue }

// Made reports whether holdfast created the record.
func (i Image) Made() bool { return i.Labels[LabelCreated] == "true" }

// IsCRIRecord reports whether a record name is one of the CRI's own sha256:<config> records.
func IsCRIRecord(name string) bool { return strings.HasPrefix(name, "sha256:") }

// Want is one image a source wants: a name and its target.
type Want struct {
	Name   string             `json:"name"`
	Target ocispec.Descriptor `json:"target"`
	// Recorded is the name as the source spells it, when that is not Name
	// (a haul's index.docker.io/…): status shows both.
	Recorded string `json:"recorded,omitempty"`
	// Signatures are the cosign signature manifests a pull found for the
	// image in its registry (<repo>:sha256-<hex>.sig); a pull list's lease
	// holds them, and its state lists them (SourceState.Signatures).
	Signatures []ocispec.Descriptor `json:"signatures,omitempty"`
	// Signs is the target of the image whose signatures this record names
	// (<repo>:sha256-<hex>.sig, or the referrers tag <repo>:sha256-<hex>),
	// so that a peer mirror serves them: such a want is no image. It is
	// judged, named and removed with the image it signs.
	Signs digest.Digest `json:"signs,omitempty"`
}

// SourceState is the desired state of one source, as kept in the store on its lease.
type SourceState struct {
	Lease    string `json:"lease"`
	Source   string `json:"source"`
	Identity string `json:"identity"`
	MtimeNs  int64  `json:"mtimeNs"` // the source's mtime: on a conflict the newest source wins
	Images   []Want `json:"images"`
	// Blobs are the host-platform blobs the images need: the source is intact
	// while every one is in the store.
	Blobs    []digest.Digest `json:"blobs,omitempty"`
	Complete bool            `json:"-"` // the state blob exists: the import finished
	// Intact says every blob in Blobs was in the store when Sources read the
	// state: a complete, intact source needs no import at the same identity.
	Intact bool `json:"-"`
	// Missing are the blobs of Blobs found missing when Intact is false
	// (empty when the state listed no blobs and only the walk could tell).
	Missing   []digest.Digest `json:"-"`
	CreatedAt time.Time       `json:"-"`
	// Size is the bytes of the host-platform blobs the images need.
	Size int64 `json:"size,omitempty"`
	// Kept says the source was imported to be kept until released (its
	// lease carries LabelKept): passes keep it whether its file exists or
	// not. ImportedAt is when.
	Kept       bool      `json:"-"`
	ImportedAt time.Time `json:"-"`
	// Format is the archive's layout (docker-save, oci, hauler-haul,
	// zarf-package, …); Skipped counts, by reason, the entries of a bundle
	// that are no images (signature, attestation, chart, …).
	Format  string         `json:"format,omitempty"`
	Skipped map[string]int `json:"skipped,omitempty"`
	// Signatures are, by image target, the signature manifests the source
	// carried for its images (cosign's .sig tags, sigstore bundle
	// referrers), leased with their layers, so that a pass judges the
	// images against a signature policy without the archive.
	// SignaturesRecorded is false in a state written before holdfast kept
	// them: with a policy in force such a source is imported again.
	Signatures         map[digest.Digest][]ocispec.Descriptor `json:"signatures,omitempty"`
	SignaturesRecorded bool                                   `json:"signaturesRecorded,omitempty"`
	// PeerCopies is false in a state written before the records of an
	// archive's signatures named peer copies (manifests carrying their
	// blobs inline) rather than the manifests kept: such a source is
	// imported again.
	PeerCopies bool `json:"peerCopies,omitempty"`
	// Package is a signed Zarf package's signature and the zarf.yaml it
	// signs, leased with the source: it vouches for the source's images.
	Package *PackageSignature `json:"package,omitempty"`
	// Referrers are, by image target, the other referrers the source
	// carried of its images (an SBOM, the signatures of its platforms'
	// manifests, and theirs: the SBOM's signature), each with its subject
	// in its annotations (io.containerd.manifest.subject), leased with
	// their blobs so that an export carries them as they came. They are
	// no signatures to a policy. ReferrersKept is false in a state written
	// before holdfast kept them: such a source that skipped referrers is
	// imported again.
	Referrers     map[digest.Digest][]ocispec.Descriptor `json:"referrers,omitempty"`
	ReferrersKept bool                                   `json:"referrersKept,omitempty"`
}

// PackageSignature is where a Zarf package's zarf.yaml and its
// zarf.bundle.sig are kept in the content store.
type PackageSignature struct {
	Manifest ocispec.Descriptor `json:"manifest"`
	Bundle   ocispec.Descriptor `json:"bundle"`
}

// ServerInfo describes the store's server.
type ServerInfo struct {
	Version string
}

// ImportRequest is one archive (or OCI layout directory) to import.
type ImportRequest struct {
	Source   string       // path, as the operator named it
	Identity string       // changes whenever the content may have changed
	MtimeNs  int64        // the source mtime
	Dir      bool         // an OCI layout directory, not a file
	Prior    *SourceState // the source's state at this identity if the caller read it already
	Kept     bool         // import as a kept source, leased until released (holdfast import)
	Name     string       // names the image of a layout that names none (a cosign layout): holdfast import --name
	// Signed: a signature policy is in force, so a source whose complete
	// state did not record its signatures (SignaturesRecorded) is imported
	// again rather than found unchanged.
	Signed bool
	Open   func() (io.ReadCloser, error) // opens the archive stream (files)
}

// LeaseRequest asks to lease images already in the store for a source that
// names images instead of holding them (a pin list).
type LeaseRequest struct {
	Source   string
	Identity string // the list file's identity and what it wants: a new one gets a new lease
	MtimeNs  int64
	Wants    []Want
}

// PullOptions tune one pull.
type PullOptions struct {
	HostsDir string        // hosts.toml configuration (containerd's certs.d layout); empty: defaults
	Lease    string        // the lease that holds what is fetched
	Timeout  time.Duration // for the whole pull
	// Credentials returns a username and password for a registry host, or empty ones.
	Credentials func(host string) (string, string, error)
	// Log, when set, hears at debug level of the signatures a pull could
	// not fetch (a broken referrers list, a signature over its bounds).
	Log *slog.Logger
	// Prefer, when set, is a peer's mirror (http://host:port or
	// https://host:port, no path) to fetch the image's content from before
	// the hosts of HostsDir, asking it for what it holds itself: the
	// reference still resolves through HostsDir's hosts, and what fails
	// there goes on to them. One that is no such URL is ignored.
	Prefer string
}

// ImportResult is what an import did.
type ImportResult struct {
	Lease     string
	Images    []Want
	Format    string
	BytesRead int64
	Written   int  // blobs written
	Present   int  // blobs already in the store (leased, not rewritten)
	Unchanged bool // a complete lease for this identity existed; nothing was read
	// Skipped names, one line each, the entries of a bundle that are no
	// images and were not imported: "<name> <digest>: signature".
	Skipped []string
	// State is the source's state on its lease once the import is done: the
	// one it wrote, or the one it found complete (Unchanged).
	State SourceState `json:"-"`
}

// ImageDetail is a record with what status shows about it.
type ImageDetail struct {
	Image
	ConfigDigest digest.Digest // CRI image ID
	Size         int64         // bytes of the host platform's content
}

// ImageEventKind is what happened to a record.
type ImageEventKind string

const (
	ImageCreated ImageEventKind = "create"
	ImageUpdated ImageEventKind = "update"
	ImageDeleted ImageEventKind = "delete"
)

// ImageEvent says a record changed: it only means "read this name again".
type ImageEvent struct {
	Kind   ImageEventKind
	Name   string
	Labels map[string]string
}

// PinOptions are what PinOption values set for one Pin.
type PinOptions struct {
	// First says holdfast pins the name for the first time: a CRI pin already
	// on the record is a user's, and is remembered as a prior pin so that
	// unpinning leaves it. A heal of a name holdfast pinned before never
	// records one: the CRI pin it finds is holdfast's own.
	First bool
}

// PinOption tunes one Pin; without any, Pin heals.
type PinOption func(*PinOptions)

// FirstPin marks a pin as holdfast's first pin of the name when first is true
// (see PinOptions.First).
func FirstPin(first bool) PinOption { return func(o *PinOptions) { o.First = first } }

// ApplyPinOptions collects what opts set, for implementations of Pin.
func ApplyPinOptions(opts []PinOption) PinOptions {
	var o PinOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// PinResult says what Pin had to change.
type PinResult struct {
	Created    bool // the record was missing
	Retargeted bool // the record pointed elsewhere
	Labelled   bool // a pin label was missing
}

// Changed reports whether Pin wrote anything.
func (p PinResult) Changed() bool { return p.Created || p.Retargeted || p.Labelled }

// Runtime is an image store holdfast reconciles: its records, leases, pins
// and events. Imports write to its content through Store, which a
// backend offers beside this interface (Backend).
type Runtime interface {
	Server(ctx context.Context) (ServerInfo, error)
	// Pull fetches an image's host-platform content from its registry under
	// opts.Lease and returns its target, with the cosign signatures the
	// registry holds for it (Want.Signatures): its legacy .sig manifest and
	// those of its referrers that may be signatures, each fetched whole. It
	// makes no record and never pins.
	Pull(ctx context.Context, ref string, opts PullOptions) (Want, error)
	// TempLease makes a lease for content fetched before its source's own
	// lease exists; Release it when done.
	TempLease(ctx context.Context) (string, error)
	// Records lists every image record, the CRI's own sha256: records too.
	Records(ctx context.Context) ([]Image, error)
	// Images lists records, without the CRI's own, with what status shows.
	Images(ctx context.Context) ([]ImageDetail, error)
	// Sources lists the desired state kept on holdfast's leases.
	Sources(ctx context.Context) ([]SourceState, error)
	// Pin makes a record point at its target with both pin labels, touching
	// no other label. Only with FirstPin(true) is a CRI pin found on the
	// record remembered as a user's (LabelPriorPin). On a store whose GC
	// collects records by their expiry (LabelExpire, containerd 2.x), a
	// record holdfast pins is held past it until holdfast unpins it.
	Pin(ctx context.Context, w Want, opts ...PinOption) (PinResult, error)
	// Unpin removes holdfast's pin label from a record it owns, and the CRI's
	// unless that was there before holdfast's; its expiry, if any, counts
	// again.
	Unpin(ctx context.Context, name string) error
	// Delete deletes a record holdfast made (LabelCreated) while it still
	// points at target; any other record is left as it is.
	Delete(ctx context.Context, name string, target digest.Digest) error
	// Release deletes one of holdfast's leases.
	Release(ctx context.Context, lease string) error
	// WatchImages streams image events; subscribe before listing.
	WatchImages(ctx context.Context) (<-chan ImageEvent, <-chan error)
	// CRIImages asks the CRI image service about each name: whether it sees
	// the image and reports it pinned. ErrNoCRI when there is none.
	CRIImages(ctx context.Context, names []string) (map[string]CRIImage, error)
	// Cleanup aborts holdfast's stale ingests: its own from an earlier run,
	// and any left unwritten for long, and the temp files of direct writes
	// whose writer is gone; never another holdfast's live import. It also
	// makes the hold past expiry (Pin) cover exactly the records that carry
	// holdfast's pin label, whichever holdfast pinned them.
	Cleanup(ctx context.Context) error
	Close() error
}

// PolicyInForce is the signature policy an agent (holdfast run --policy) put
// in force in a namespace by its claim (Policies): every holdfast command
// that writes into the namespace judges by it.
type PolicyInForce struct {
	Path string // the policy file
	By   string // who put it in force: "holdfast run, data dir /var/lib/holdfast"
}

// Policies is the signature policy in force in a namespace. One claimant
// at a time holds it: taking the claim is one atomic step of the store, so
// of two agents that start together with different policies exactly one
// puts its policy in force, and the other learns who holds the claim.
type Policies interface {
	// PolicyInForce reads the policy in force; ok is false when none is.
	PolicyInForce(ctx context.Context) (p PolicyInForce, ok bool, err error)
	// SetPolicyInForce claims the namespace for p.Path on behalf of p.By.
	// The claimant that holds it (the same By) takes it again, with
	// p.Path; anyone else gets a *PolicyClaimedError naming the holder. An
	// empty p.Path withdraws p.By's claim: no policy is in force after it.
	SetPolicyInForce(ctx context.Context, p PolicyInForce) error
}

// PolicyClaimedError says another claimant holds the namespace's policy.
type PolicyClaimedError struct {
	Namespace string
	Holder    PolicyInForce
}

func (e *PolicyClaimedError) Error() string {
	return fmt.Sprintf("namespace %s: %s holds the signature policy's claim, with %s in force", e.Namespace, e.Holder.By, e.Holder.Path)
}

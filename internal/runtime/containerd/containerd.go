// Package containerd is holdfast's runtime backed by a containerd server. It is
// the only package that imports containerd's client.
package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	contentapi "github.com/containerd/containerd/api/services/content/v1"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"google.golang.org/grpc"

	"github.com/holdfast-project/holdfast/internal/datadir"
	"github.com/holdfast-project/holdfast/internal/files"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// refPrefix starts every ingest ref holdfast opens, so stale ones can be
// aborted. A ref reads holdfast-<owner>-<run>-<import>-<n>: the owner is the
// data dir's (see OwnIngests), the run this Runtime's.
const refPrefix = "holdfast-"

// staleIngestAge is how long a holdfast ingest of another owner (or of no
// known owner) must have gone unwritten before a pass aborts it: its writer
// is surely gone. A live import writes its open ingests continuously.
const staleIngestAge = time.Hour

// Runtime talks to one containerd namespace.
type Runtime struct {
	client    *containerd.Client
	content   contentapi.ContentClient // the content service, for what its proxy does slowly
	namespace string
	platform  oci.Platform
	// version is the server's version as New found it; fresh says no call of
	// Server has used it yet (later calls ask again: containerd may have been
	// upgraded and restarted since).
	version string
	fresh   atomic.Bool
	states  stateCache
	// owner and run go into every ingest ref: Cleanup aborts the owner's
	// ingests of other runs, and leaves other owners' alone unless stale.
	owner string
	run   string
	space *spaceGuard // the disk check of imports
	// direct says whether imports write blobs into the store's directory.
	direct *directWriter
	// labelMu makes merges of distribution source labels one at a time.
	labelMu sync.Mutex
	// lost are blobs listed by the store whose files are gone.
	lost lostBlobs
	// holds keep the records holdfast pins past any expiry (expiry.go).
	holds holds
}

var _ runtime.Runtime = &Runtime{}

// Option sets how a Runtime works; New applies them in order.
type Option func(*Runtime) error

// WithSpace sets how imports check the content store's free space. Without
// it they check with the default MinFree and say nothing when they cannot.
func WithSpace(opts SpaceOptions) Option {
	return func(r *Runtime) error { r.space = &spaceGuard{opts: opts}; return nil }
}

// WithWritePath sets how imports write blobs; without it they stream (the
// path of containerd's own import).
func WithWritePath(opts WriteOptions) Option {
	return func(r *Runtime) error { r.direct = &directWriter{opts: opts}; return nil }
}

// WithStateCache keeps copies of the leases' state blobs in dir (see
// stateCache).
func WithStateCache(dir string) Option {
	return func(r *Runtime) error { r.states = stateCache{dir: dir}; return nil }
}

// WithOwner makes the Runtime's ingests the data dir's (see OwnIngests). Use
// it only while holding the data dir's lock.
func WithOwner(dataDir string) Option {
	return func(r *Runtime) error { return r.OwnIngests(dataDir) }
}

// New connects to the containerd at address and works in namespace.
func New(ctx context.Context, address, namespace string, opts ...Option) (*Runtime, error) {
	address, err := socketPath(address)
	if err != nil {
		return nil, fmt.Errorf("connecting to containerd: %w", err)
	}
	c, err := containerd.New(address, containerd.WithDefaultNamespace(namespace), containerd.WithTimeout(10*time.Second),
		// Blob data leaves in 1 MiB messages: a socket write buffer of the
		// same size sends each in one write(2), not 32 (gRPC's default is
		// 32 KiB); measured about a tenth less client CPU on a 1 GiB import.
		containerd.WithExtraDialOpts([]grpc.DialOption{grpc.WithWriteBufferSize(writeChunk + 64<<10)}))
	if err != nil {
		return nil, fmt.Errorf("connecting to containerd at %s: %w", address, err)
	}
	conn, ok := c.Conn().(*grpc.ClientConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("connecting to containerd at %s: not a gRPC connection", address)
	}
	r := &Runtime{client: c, content: contentapi.NewContentClient(conn), namespace: namespace, platform: oci.HostPlatform(),
		owner: randomHex(8), run: randomHex(4), space: &spaceGuard{}}
	v, err := c.Version(r.ns(ctx))
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("connecting to containerd at %s: %w", address, err)
	}
	r.version = v.Version
	r.fresh.Store(true)
	for _, o := range opts {
		if err := o(r); err != nil {
			c.Close()
			return nil, err
		}
	}
	return r, nil
}

// socketPath is address as a path, checked before the dial: gRPC's dialer
// retries a socket that is not there until its deadline and then says
// "timeout", where the cause is plain at once. A socket that is there and does
// not answer still times out. "unix://" is taken off: the client dials paths.
func socketPath(address string) (string, error) {
	path := strings.TrimPrefix(address, "unix://")
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if st.Mode().Type() != os.ModeSocket {
		return "", fmt.Errorf("%s is not a socket", path)
	}
	return path, nil
}

// OwnIngests (WithOwner) makes the ingests of this Runtime the data dir's: their refs
// carry the owner ID kept in dataDir (created on first use), so that a later
// run on the same data dir aborts what this one leaves behind. Call it only
// while holding the data dir's lock: the lock makes the owner exclusive.
// Without it a Runtime is an owner of its own, and aborts only stale ingests.
func (r *Runtime) OwnIngests(dataDir string) error {
	path := datadir.At(dataDir).IngestOwner()
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if id := strings.TrimSpace(string(data)); validOwner(id) {
		r.owner = id
		return nil
	}
	id := randomHex(8)
	if err := files.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	r.owner = id
	return nil
}

// validOwner reports whether id can be an owner ID: 16 lowercase hex digits.
func validOwner(id string) bool {
	if len(id) != 16 {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Close closes the connection.
func (r *Runtime) Close() error {
	r.direct.dropProbe(r.ns(context.Background()))
	return r.client.Close()
}

func (r *Runtime) ns(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, r.namespace)
}

// Server reports the server's version.
func (r *Runtime) Server(ctx context.Context) (runtime.ServerInfo, error) {
	ctx = r.ns(ctx)
	info := runtime.ServerInfo{Version: r.version}
	if !r.fresh.Swap(false) {
		v, err := r.client.Version(ctx)
		if err != nil {
			return info, fmt.Errorf("asking containerd its version: %w", err)
		}
		info.Version = v.Version
	}
	return info, nil
}

// Cleanup aborts holdfast's ingests that are provably stale: this owner's
// from an earlier run (a crash mid-import: the data dir's lock says no other
// process of this owner runs), and any holdfast ingest nobody has written for
// staleIngestAge. Another holdfast's live import (another data dir, the same
// containerd) is left alone. With direct writes, it also removes the temp
// files of writers that are gone. It deletes the leases of content-root
// probes whose life is over (sweepProbes). And it makes the lease that holds
// the records holdfast pins hold exactly those (syncHolds).
func (r *Runtime) Cleanup(ctx context.Context) error {
	ctx = r.ns(ctx)
	cs := r.client.ContentStore()
	statuses, err := cs.ListStatuses(ctx, fmt.Sprintf(`ref~=^%s`, refPrefix))
	if err != nil {
		return fmt.Errorf("listing ingests: %w", err)
	}
	var errs []error
	for _, st := range statuses {
		if !r.stale(st, time.Now()) {
			continue
		}
		if err := cs.Abort(ctx, st.Ref); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("aborting ingest %s: %w", st.Ref, err))
		}
	}
	errs = append(errs, r.sweepProbes(ctx, time.Now()), r.direct.sweep(ctx, r))
	errs = append(errs, r.syncHolds(ctx))
	return errors.Join(errs...)
}

// stale reports whether Cleanup may abort an ingest.
func (r *Runtime) stale(st content.Status, now time.Time) bool {
	mine := refPrefix + r.owner + "-"
	if strings.HasPrefix(st.Ref, mine) {
		return !strings.HasPrefix(st.Ref, mine+r.run+"-")
	}
	return strings.HasPrefix(st.Ref, refPrefix) && now.Sub(st.UpdatedAt) > staleIngestAge
}

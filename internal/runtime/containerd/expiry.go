package containerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// holdLease is the ID of the lease that holds, by name, every record holdfast
// pins (io.holdfast.pinned), so that containerd 2.x's GC never collects one
// whose containerd.io/gc.expire has passed: an expired record is collected
// unless a lease holds it (core/metadata/gc.go). Like the policy's claim
// lease, its ID is outside runtime.LeasePrefix: nothing that lists, cleans or
// releases the sources' leases sees it, and it never expires. On 1.x every
// record is a root of the GC and a lease takes no records: there is no hold.
const holdLease = "io.holdfast.records"

// resourceImages is the type of a lease's resource that is an image record.
const resourceImages = "images"

// holds keeps the lease of the records holdfast pins (holdLease) as the pins
// go: a name is held exactly while its record carries holdfast's pin label,
// whichever holdfast process pinned it, so agents on one namespace never undo
// each other's holds. Each record whose expiry it outlives is reported once,
// with its label's time.
type holds struct {
	log *slog.Logger
	// off says the store collects no records by their expiry (1.x), or
	// takes no records on a lease: nothing is held.
	off      atomic.Bool
	mu       sync.Mutex
	reported map[string]string // name → the expiry last reported for it
}

// holding says whether this store collects records by their expiry and takes
// them on a lease (2.x): only then are records held.
func (r *Runtime) holding() bool {
	return !r.holds.off.Load() && runtime.ExpiresRecords(r.version)
}

// WithLog sets where the Runtime says what it does on its own: the records
// whose expiry its hold outlives. Without it, it says nothing.
func WithLog(log *slog.Logger) Option {
	return func(r *Runtime) error { r.holds.log = log; return nil }
}

// hold puts the record name on the hold lease (made if missing), and reports
// the record's expiry when it has one.
func (r *Runtime) hold(ctx context.Context, name string, labels map[string]string) error {
	if !r.holding() {
		return nil
	}
	ls := r.client.LeasesService()
	res := leases.Resource{ID: name, Type: resourceImages}
	err := ls.AddResource(ctx, leases.Lease{ID: holdLease}, res)
	if errdefs.IsNotFound(err) {
		if _, err = ls.Create(ctx, leases.WithID(holdLease)); err != nil && !errdefs.IsAlreadyExists(err) {
			return fmt.Errorf("making the lease %s: %w", holdLease, err)
		}
		err = ls.AddResource(ctx, leases.Lease{ID: holdLease}, res)
	}
	if errdefs.IsNotImplemented(err) {
		// A store whose leases take no records: it collects none by expiry
		// either (1.x); say nothing.
		r.holds.off.Store(true)
		return nil
	}
	if err != nil {
		return fmt.Errorf("holding record %s: %w", name, err)
	}
	r.reportExpiry(name, labels)
	return nil
}

// unhold takes the record name off the hold lease.
func (r *Runtime) unhold(ctx context.Context, name string) error {
	if !r.holding() {
		return nil
	}
	err := r.client.LeasesService().DeleteResource(ctx, leases.Lease{ID: holdLease}, leases.Resource{ID: name, Type: resourceImages})
	if err != nil && !errdefs.IsNotFound(err) && !errdefs.IsNotImplemented(err) {
		return fmt.Errorf("releasing the hold on record %s: %w", name, err)
	}
	r.holds.mu.Lock()
	delete(r.holds.reported, name)
	r.holds.mu.Unlock()
	return nil
}

// reportExpiry says once per record, and again only when its expiry
// changes, that a record holdfast pins carries an expiry the hold outlives.
func (r *Runtime) reportExpiry(name string, labels map[string]string) {
	exp, ok := labels[runtime.LabelExpire]
	if !ok {
		return
	}
	r.holds.mu.Lock()
	defer r.holds.mu.Unlock()
	if r.holds.reported == nil {
		r.holds.reported = map[string]string{}
	}
	if prev, ok := r.holds.reported[name]; ok && prev == exp {
		return
	}
	r.holds.reported[name] = exp
	if r.holds.log != nil {
		r.holds.log.Warn("a record holdfast pins carries an expiry set by another writer; holdfast's lease keeps the record past it",
			"name", name, "expire", exp, "lease", holdLease)
	}
}

// syncHolds makes the hold lease hold exactly the records that carry
// holdfast's pin label: those pinned before holdfast held them, or by a
// holdfast that does not, are held; names whose record is gone or no longer
// pinned by holdfast are let go. The resources are read before the records,
// and a name is let go only after its record is read again: a record that a
// Pin makes meanwhile is made before it is held, so it is never let go.
func (r *Runtime) syncHolds(ctx context.Context) error {
	if !r.holding() {
		return nil
	}
	res, err := r.client.LeasesService().ListResources(ctx, leases.Lease{ID: holdLease})
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("listing the lease %s: %w", holdLease, err)
	}
	held := map[string]bool{}
	for _, rs := range res {
		if rs.Type == resourceImages {
			held[rs.ID] = true
		}
	}
	owned, err := r.client.ImageService().List(ctx, fmt.Sprintf(`labels.%q==%s`, runtime.LabelPinned, runtime.PinnedValue))
	if err != nil {
		return fmt.Errorf("listing the records holdfast pins: %w", err)
	}
	var errs []error
	for _, img := range owned {
		if held[img.Name] {
			delete(held, img.Name)
			r.reportExpiry(img.Name, img.Labels)
			continue
		}
		errs = append(errs, r.hold(ctx, img.Name, img.Labels))
	}
	for name := range held {
		img, found, err := r.record(ctx, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !found || img.Labels[runtime.LabelPinned] != runtime.PinnedValue {
			errs = append(errs, r.unhold(ctx, name))
		}
	}
	return errors.Join(errs...)
}

// holdPinned holds a record Pin has just written, or found pinned already
// with an expiry (a pass's sync holds the others). A store that collects no
// records by expiry is not asked.
func (r *Runtime) holdPinned(ctx context.Context, img images.Image, wrote bool) error {
	if !r.holding() {
		return nil
	}
	if _, ok := img.Labels[runtime.LabelExpire]; !wrote && !ok {
		return nil
	}
	return r.hold(ctx, img.Name, img.Labels)
}

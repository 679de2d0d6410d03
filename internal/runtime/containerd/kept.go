package containerd

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// keptPrefix follows runtime.LeasePrefix in the ID of a kept source's lease,
// so that it never equals the lease of an images-dir source at the same path.
const keptPrefix = "kept-"

// keptMark leads the source a kept source's lease and state record: the path
// with it is no path under any images dir, so a holdfast older than kept
// sources judges the lease as another configuration's and leaves it alone
// rather than release it as an images-dir source whose file is gone.
const keptMark = "kept:"

// storedSource is what a lease and its state record say of a source's path.
func storedSource(path string, kept bool) string {
	if kept {
		return keptMark + path
	}
	return path
}

// sourcePath is the path of a stored source (kept sources made before the
// mark have none).
func sourcePath(stored string, kept bool) string {
	if kept {
		return strings.TrimPrefix(stored, keptMark)
	}
	return stored
}

// KeptLeaseID names the lease of a kept source (holdfast import) of one path
// at one identity.
func KeptLeaseID(source, identity string) string {
	return runtime.LeasePrefix + keptPrefix + strings.TrimPrefix(LeaseID(source, identity), runtime.LeasePrefix)
}

// createKept makes a kept source's lease, unless it exists, with the labels
// that make it kept: they live in containerd with the lease, so a lost data
// dir forgets nothing. Import then fills it as any source's.
func (r *Runtime) createKept(ctx context.Context, id string, req runtime.ImportRequest) error {
	_, err := r.client.LeasesService().Create(ctx, leases.WithID(id), leases.WithLabels(map[string]string{
		runtime.LabelSource:     truncateLabel(storedSource(req.Source, true)),
		runtime.LabelIdentity:   truncateLabel(req.Identity),
		runtime.LabelKept:       "true",
		runtime.LabelImportedAt: time.Now().UTC().Format(time.RFC3339),
	}))
	if err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("creating lease %s: %w", id, err)
	}
	return nil
}

// readKept fills in what a lease's labels say about a kept source.
func readKept(l leases.Lease, st *runtime.SourceState) {
	if l.Labels[runtime.LabelKept] != "true" {
		return
	}
	st.Kept = true
	st.Source = sourcePath(st.Source, true)
	st.ImportedAt = l.CreatedAt
	if t, err := time.Parse(time.RFC3339, l.Labels[runtime.LabelImportedAt]); err == nil {
		st.ImportedAt = t
	}
}

package containerd

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// createKept makes a kept source's lease, unless it exists, with the labels
// that make it kept: they live in containerd with the lease, so a lost data
// dir forgets nothing. Import then fills it as any source's.
func (r *Runtime) createKept(ctx context.Context, id string, req runtime.ImportRequest) error {
	_, err := r.client.LeasesService().Create(ctx, leases.WithID(id), leases.WithLabels(map[string]string{
		runtime.LabelSource:     runtime.TruncateLabel(runtime.StoredSource(req.Source, true)),
		runtime.LabelIdentity:   runtime.TruncateLabel(req.Identity),
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
	st.Source = runtime.SourcePath(st.Source, true)
	st.ImportedAt = l.CreatedAt
	if t, err := time.Parse(time.RFC3339, l.Labels[runtime.LabelImportedAt]); err == nil {
		st.ImportedAt = t
	}
}

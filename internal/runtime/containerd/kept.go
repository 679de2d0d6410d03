package containerd

import (
	"time"

	"github.com/containerd/containerd/v2/core/leases"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

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

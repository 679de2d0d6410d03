package signature

import (
	"context"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// StoreJudge is a Judge of pol that reads the signatures sources keep from
// a content store.
func StoreJudge(pol *Policy, store oci.Reader) *Judge {
	return &Judge{Policy: pol, Blobs: store}
}

// Enforced says, for each of wants, why a node that enforces the policy
// refuses it, whatever the policy's own mode; "" for one it takes. The
// wants are judged by the signatures states keep for them.
func (j *Judge) Enforced(ctx context.Context, states []runtime.SourceState, wants []runtime.Want) []string {
	judgment := j.For(ctx, states)
	out := make([]string, len(wants))
	for i, w := range wants {
		if v := judgment.Of(w.Name, w.Target); Enforce.Refuses(v) {
			out[i] = v.String()
		}
	}
	return out
}

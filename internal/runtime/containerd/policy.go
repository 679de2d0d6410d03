package containerd

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// Labels of the namespace that say which signature policy an agent put in
// force there (runtime.PolicyInForce).
const (
	labelPolicy   = "io.holdfast.policy"
	labelPolicyBy = "io.holdfast.policy-by"
)

// PolicyInForce reads the signature policy an agent put in force in the
// namespace; ok is false when none did.
func (r *Runtime) PolicyInForce(ctx context.Context) (p runtime.PolicyInForce, ok bool, err error) {
	labels, err := r.client.NamespaceService().Labels(ctx, r.namespace)
	if errdefs.IsNotFound(err) {
		return p, false, nil
	}
	if err != nil {
		return p, false, fmt.Errorf("reading the labels of namespace %s: %w", r.namespace, err)
	}
	p = runtime.PolicyInForce{Path: labels[labelPolicy], By: labels[labelPolicyBy]}
	return p, p.Path != "", nil
}

// SetPolicyInForce says in the namespace's labels that p is in force there,
// so that every holdfast command writing into it uses p. An empty p.Path
// takes the labels away.
func (r *Runtime) SetPolicyInForce(ctx context.Context, p runtime.PolicyInForce) error {
	ns := r.client.NamespaceService()
	for attempt := 0; attempt < 2; attempt++ {
		err := ns.SetLabel(ctx, r.namespace, labelPolicy, p.Path)
		if err == nil {
			err = ns.SetLabel(ctx, r.namespace, labelPolicyBy, p.By)
		}
		if errdefs.IsNotFound(err) && p.Path != "" && attempt == 0 {
			// A namespace nothing has written into yet.
			if cerr := ns.Create(ctx, r.namespace, nil); cerr != nil && !errdefs.IsAlreadyExists(cerr) {
				return fmt.Errorf("creating namespace %s: %w", r.namespace, cerr)
			}
			continue
		}
		if errdefs.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("labelling namespace %s: %w", r.namespace, err)
		}
		return nil
	}
	return nil
}

// Namespace is the namespace the runtime works in.
func (r *Runtime) Namespace() string { return r.namespace }

package containerd

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// Labels that say which signature policy an agent put in force in the
// namespace (runtime.PolicyInForce): on the claim lease, and copied to the
// namespace's labels.
const (
	labelPolicy   = "io.holdfast.policy"
	labelPolicyBy = "io.holdfast.policy-by"
)

// claimLease is the ID of the lease that holds the claim on the namespace's
// signature policy. containerd creates a lease of a given ID once and
// answers AlreadyExists after that, in one transaction of its metadata
// store: that makes the claim atomic, which labels are not (containerd
// writes a namespace's labels one by one and compares nothing). The ID is
// outside runtime.LeasePrefix, so nothing that lists or releases holdfast's
// source leases sees it; the lease holds no content and never expires.
const claimLease = "io.holdfast.policy"

var _ runtime.Policies = &Runtime{}

// PolicyInForce reads the signature policy an agent put in force in the
// namespace from its claim; ok is false when none did. Without a claim, the
// namespace's labels are what a holdfast from before the claim put in force
// by them alone. They are read before the claim: a claimant writes them
// after it has taken the claim, one by one, so labels read half-written
// always come with the claim that they copy, which is used instead.
func (r *Runtime) PolicyInForce(ctx context.Context) (p runtime.PolicyInForce, ok bool, err error) {
	labels, err := r.client.NamespaceService().Labels(ctx, r.namespace)
	if err != nil && !errdefs.IsNotFound(err) {
		return p, false, fmt.Errorf("reading the labels of namespace %s: %w", r.namespace, err)
	}
	if p, ok, err = r.policyClaim(ctx); err != nil || ok {
		return p, ok, err
	}
	p = runtime.PolicyInForce{Path: labels[labelPolicy], By: labels[labelPolicyBy]}
	return p, p.Path != "", nil
}

// policyClaim reads the claim lease.
func (r *Runtime) policyClaim(ctx context.Context) (p runtime.PolicyInForce, ok bool, err error) {
	ls, err := r.client.LeasesService().List(r.ns(ctx), fmt.Sprintf("id==%q", claimLease))
	if err != nil {
		return p, false, fmt.Errorf("reading the signature policy's claim in namespace %s: %w", r.namespace, err)
	}
	for _, l := range ls {
		if l.ID == claimLease {
			return runtime.PolicyInForce{Path: l.Labels[labelPolicy], By: l.Labels[labelPolicyBy]}, true, nil
		}
	}
	return p, false, nil
}

// SetPolicyInForce claims the namespace's signature policy for p (see
// runtime.Policies), then copies it to the namespace's labels for holdfasts
// from before the claim. A withdrawal takes the labels away first and the
// claim last, so that no reader finds the labels of a claim that is gone.
func (r *Runtime) SetPolicyInForce(ctx context.Context, p runtime.PolicyInForce) error {
	if p.Path == "" {
		return r.withdrawPolicy(ctx, p.By)
	}
	if err := r.claimPolicy(ctx, p); err != nil {
		return err
	}
	return r.labelPolicy(ctx, p)
}

// claimPolicy creates the claim lease, or takes it again when p.By holds it.
func (r *Runtime) claimPolicy(ctx context.Context, p runtime.PolicyInForce) error {
	ls := r.client.LeasesService()
	// A few rounds: a claim withdrawn, or replaced by its holder, between
	// the create and the read is tried again.
	for range 4 {
		_, err := ls.Create(r.ns(ctx), leases.WithID(claimLease), leases.WithLabels(map[string]string{labelPolicy: p.Path, labelPolicyBy: p.By}))
		if err == nil {
			return nil
		}
		if !errdefs.IsAlreadyExists(err) {
			return fmt.Errorf("claiming the signature policy of namespace %s: %w", r.namespace, err)
		}
		holder, ok, err := r.policyClaim(ctx)
		switch {
		case err != nil:
			return err
		case !ok:
			continue
		case holder.By != p.By:
			return &runtime.PolicyClaimedError{Namespace: r.namespace, Holder: holder}
		case holder.Path == p.Path:
			return nil
		}
		// The holder's own claim, for another policy: a lease's labels
		// cannot be changed, so it is made again. Another claimant may
		// take it in between, and is then named by the next round.
		if err := r.deleteClaim(ctx); err != nil {
			return err
		}
	}
	return fmt.Errorf("claiming the signature policy of namespace %s: the claim kept changing", r.namespace)
}

// withdrawPolicy takes away the policy by put in force: the namespace's
// labels, then the claim. Another's claim is left as it is.
func (r *Runtime) withdrawPolicy(ctx context.Context, by string) error {
	holder, claimed, err := r.policyClaim(ctx)
	if err != nil {
		return err
	}
	if claimed && holder.By != by {
		return &runtime.PolicyClaimedError{Namespace: r.namespace, Holder: holder}
	}
	labels, err := r.client.NamespaceService().Labels(ctx, r.namespace)
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("reading the labels of namespace %s: %w", r.namespace, err)
	}
	if labels[labelPolicy] != "" && (labels[labelPolicyBy] == by || claimed) {
		if err := r.labelPolicy(ctx, runtime.PolicyInForce{}); err != nil {
			return err
		}
	}
	if !claimed {
		return nil
	}
	return r.deleteClaim(ctx)
}

func (r *Runtime) deleteClaim(ctx context.Context) error {
	err := r.client.LeasesService().Delete(r.ns(ctx), leases.Lease{ID: claimLease})
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("withdrawing the signature policy's claim in namespace %s: %w", r.namespace, err)
	}
	return nil
}

// labelPolicy writes p into the namespace's labels; an empty p.Path takes
// them away.
func (r *Runtime) labelPolicy(ctx context.Context, p runtime.PolicyInForce) error {
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

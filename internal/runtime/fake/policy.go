package fake

import (
	"context"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// fakeNamespace is the namespace the fake's errors name.
const fakeNamespace = "fake"

var _ runtime.Policies = &Runtime{}

// PolicyInForce reads the claim on the signature policy.
func (r *Runtime) PolicyInForce(context.Context) (runtime.PolicyInForce, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.claim == nil {
		return runtime.PolicyInForce{}, false, nil
	}
	return *r.claim, true, nil
}

// SetPolicyInForce takes, takes again or withdraws the claim under the
// fake's lock, as containerd's lease create is one transaction.
func (r *Runtime) SetPolicyInForce(_ context.Context, p runtime.PolicyInForce) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.claim != nil && r.claim.By != p.By {
		return &runtime.PolicyClaimedError{Namespace: fakeNamespace, Holder: *r.claim}
	}
	if p.Path == "" {
		r.claim = nil
		return nil
	}
	r.claim = &p
	return nil
}

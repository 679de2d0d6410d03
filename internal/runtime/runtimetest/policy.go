package runtimetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// policies is the runtime as runtime.Policies, or the case fails.
func policies(t *testing.T, rt runtime.Runtime) runtime.Policies {
	t.Helper()
	p, ok := rt.(runtime.Policies)
	if !ok {
		t.Fatalf("%T does not keep a signature policy in force (runtime.Policies)", rt)
	}
	return p
}

// policyClaimedOnce: one claimant at a time holds the namespace's signature
// policy. A second claimant (another By) is refused with the holder named,
// from this runtime and from another holdfast on the store; the holder
// takes its claim again with another policy; only the holder withdraws it.
// Claimants that claim at the same instant: exactly one wins each round.
func policyClaimedOnce(t *testing.T, s Store, _ string) {
	ctx := context.Background()
	a, b := policies(t, s.Runtime), policies(t, s.Another(t))
	first := runtime.PolicyInForce{Path: "/conformance/enforce.yaml", By: "holdfast run, data dir /conformance/a"}
	second := runtime.PolicyInForce{Path: "/conformance/warn.yaml", By: "holdfast run, data dir /conformance/b"}
	t.Cleanup(func() {
		_ = a.SetPolicyInForce(ctx, runtime.PolicyInForce{By: first.By})
		_ = b.SetPolicyInForce(ctx, runtime.PolicyInForce{By: second.By})
	})
	inForce := func(want runtime.PolicyInForce, ok bool) {
		t.Helper()
		for _, rt := range []runtime.Policies{a, b} {
			got, found, err := rt.PolicyInForce(ctx)
			if err != nil || found != ok || got != want {
				t.Fatalf("in force: %+v (found %v), %v; want %+v (found %v)", got, found, err, want, ok)
			}
		}
	}
	refused := func(err error, holder runtime.PolicyInForce) {
		t.Helper()
		var claimed *runtime.PolicyClaimedError
		if !errors.As(err, &claimed) || claimed.Holder != holder {
			t.Fatalf("a second claimant: %v; want it refused, naming %+v", err, holder)
		}
	}
	inForce(runtime.PolicyInForce{}, false)
	if err := a.SetPolicyInForce(ctx, first); err != nil {
		t.Fatal(err)
	}
	inForce(first, true)
	refused(b.SetPolicyInForce(ctx, second), first)
	refused(a.SetPolicyInForce(ctx, second), first)
	refused(b.SetPolicyInForce(ctx, runtime.PolicyInForce{By: second.By}), first)
	inForce(first, true)
	// The holder takes its claim again, with another policy.
	again := runtime.PolicyInForce{Path: "/conformance/again.yaml", By: first.By}
	if err := a.SetPolicyInForce(ctx, again); err != nil {
		t.Fatalf("the holder taking its claim again: %v", err)
	}
	inForce(again, true)
	if err := a.SetPolicyInForce(ctx, runtime.PolicyInForce{By: first.By}); err != nil {
		t.Fatalf("the holder withdrawing: %v", err)
	}
	inForce(runtime.PolicyInForce{}, false)

	for round := range 10 {
		claimants := []runtime.PolicyInForce{first, second}
		errs := make([]error, len(claimants))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, p := range claimants {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = []runtime.Policies{a, b}[i].SetPolicyInForce(ctx, p)
			}()
		}
		close(start)
		wg.Wait()
		won := -1
		for i, err := range errs {
			if err == nil {
				if won >= 0 {
					t.Fatalf("round %d: both claimants hold the claim", round)
				}
				won = i
			}
		}
		if won < 0 {
			t.Fatalf("round %d: no claimant won: %v", round, errors.Join(errs...))
		}
		refused(errs[1-won], claimants[won])
		inForce(claimants[won], true)
		if err := []runtime.Policies{a, b}[won].SetPolicyInForce(ctx, runtime.PolicyInForce{By: claimants[won].By}); err != nil {
			t.Fatal(fmt.Errorf("round %d: withdrawing: %w", round, err))
		}
	}
}

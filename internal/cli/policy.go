package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/signature"
)

// writers are the commands that name and pin images in the namespace: each
// must judge by the signature policy in force there.
var writers = map[string]bool{"run": true, "sync": true, "import": true}

// policyBy names the agent of this data dir, as the claim on a namespace's
// policy says who holds it.
func (o *options) policyBy() string { return "holdfast run, data dir " + o.dataDir }

// adoptPolicy makes this command judge by the signature policy in force in
// the namespace (runtime.PolicyInForce), which holdfast run --policy puts
// there:
//
//   - run with --policy puts its policy in force by claiming the namespace
//     (runtime.Policies), or takes its own claim again: of two agents with
//     different policies one holds the claim and the other is refused,
//     naming it, even when both start at the same instant; run without one
//     takes away the policy its own data dir's agent had put there (the
//     operator turned it off), and otherwise uses the one in force;
//   - any other command without --policy uses the policy in force;
//   - a command that writes (run, sync, import) with another --policy than
//     the one in force is refused: an image that policy refuses would be
//     named all the same.
//
// A policy in force that cannot be loaded refuses a command that writes,
// and is only reported to one that reads (status, plan, release).
func (o *options) adoptPolicy(ctx context.Context, s *session, command string) error {
	inForce, ok, err := s.rt.PolicyInForce(ctx)
	if err != nil {
		if writers[command] {
			return err
		}
		o.log.Warn("cannot tell which signature policy is in force", "error", err)
		return nil
	}
	ns := s.rt.Namespace()
	switch {
	case command == "run" && o.policyFile != "":
		if ok && inForce.By != o.policyBy() {
			return o.judgeByOthers(ns, inForce)
		}
		if ok && inForce.Path == o.policyFile {
			o.log.Debug("taking again the claim on the namespace's signature policy", "namespace", ns, "policy", o.policyFile)
		} else {
			o.log.Info("putting the signature policy in force in the namespace", "namespace", ns, "policy", o.policyFile)
		}
		err := s.rt.SetPolicyInForce(ctx, runtime.PolicyInForce{Path: o.policyFile, By: o.policyBy()})
		if claimed := (*runtime.PolicyClaimedError)(nil); errors.As(err, &claimed) {
			// Another agent took the claim since it was read.
			return o.judgeByOthers(ns, claimed.Holder)
		}
		return err
	case command == "run" && ok && inForce.By == o.policyBy():
		o.log.Info("this agent runs without a signature policy: the one it had put in force is no longer", "namespace", ns, "policy", inForce.Path)
		return s.rt.SetPolicyInForce(ctx, runtime.PolicyInForce{By: o.policyBy()})
	case !ok:
		return nil
	case o.policyFile == "":
		pol, err := signature.LoadWith(inForce.Path, signature.Options{InsecurePerms: o.insecurePerms})
		if err != nil {
			err = fmt.Errorf("namespace %s: the signature policy in force, %s (put in force by %s), cannot be used:\n%w", ns, inForce.Path, inForce.By, err)
			if writers[command] {
				return err
			}
			o.log.Warn(err.Error())
			return nil
		}
		o.log.Debug("judging by the signature policy in force in the namespace", "namespace", ns, "policy", inForce.Path, "by", inForce.By)
		o.policyFile, o.policy, o.policyInForce = inForce.Path, pol, &inForce
	case o.policyFile != inForce.Path && writers[command]:
		return &usageError{fmt.Errorf("namespace %s: %s put the signature policy %s in force; holdfast %s must judge by it: give --policy %s, or none", ns, inForce.By, inForce.Path, command, inForce.Path)}
	default:
		o.policyInForce = &inForce
	}
	return nil
}

// judgeByOthers is what run --policy does where another agent holds the
// claim on the namespace's policy: it judges by the same policy, or is
// refused.
func (o *options) judgeByOthers(ns string, holder runtime.PolicyInForce) error {
	if holder.Path != o.policyFile {
		return &usageError{fmt.Errorf("namespace %s: %s put the signature policy %s in force; another agent on the namespace must judge by the same one: give --policy %s, or none", ns, holder.By, holder.Path, holder.Path)}
	}
	o.policyInForce = &holder
	return nil
}

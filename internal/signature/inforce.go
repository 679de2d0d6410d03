package signature

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// InForceRequest is what a command brings to the policy in force in its
// namespace (Adopt).
type InForceRequest struct {
	Namespace string
	// Caller names the command in what it is told: "holdfast import".
	Caller string
	// Writes: the command names and pins images in the namespace, so it
	// must judge by the policy in force.
	Writes bool
	// Agent names the agent (holdfast run) that makes the request as its
	// claim on the namespace names it ("holdfast run, data dir D"); empty
	// for every other command.
	Agent string
	// File is the policy file the command was given (--policy); empty for
	// none.
	File string
	// Options load the policy in force when the command judges by it.
	Options Options
	// Log is told what was decided; nil tells nothing.
	Log *slog.Logger
}

// Adoption is the policy a command judges by: File and Policy where it
// judges by one it was not given (Policy nil: the one it was given, if
// any), InForce where that is the policy in force.
type Adoption struct {
	File    string
	Policy  *Policy
	InForce *runtime.PolicyInForce
}

// RefusedError refuses a command that writes with another policy than the
// one in force: an image that policy refuses would be named all the same.
type RefusedError struct {
	Holder runtime.PolicyInForce
	msg    string
}

func (e *RefusedError) Error() string { return e.msg }

// Adopt makes a command judge by the signature policy in force in the
// namespace (runtime.PolicyInForce), which holdfast run --policy puts there:
//
//   - the agent with a policy file puts it in force by claiming the
//     namespace (runtime.Policies), or takes its own claim again: of two
//     agents with different policies one holds the claim and the other is
//     refused, naming it, even when both start at the same instant; the
//     agent without one takes away the policy it had put there (the
//     operator turned it off), and otherwise uses the one in force;
//   - any other command without a policy file uses the policy in force;
//   - a command that writes with another policy file than the one in force
//     is refused (a *RefusedError): an image that policy refuses would be
//     named all the same.
//
// A policy in force that cannot be loaded refuses a command that writes,
// and is only reported to one that reads.
func Adopt(ctx context.Context, p runtime.Policies, req InForceRequest) (Adoption, error) {
	log := req.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ns := req.Namespace
	own := Adoption{File: req.File}
	inForce, ok, err := p.PolicyInForce(ctx)
	if err != nil {
		if req.Writes {
			return own, err
		}
		log.Warn("cannot tell which signature policy is in force", "error", err)
		return own, nil
	}
	switch {
	case req.Agent != "" && req.File != "":
		return claim(ctx, p, req, inForce, ok, log)
	case req.Agent != "" && ok && inForce.By == req.Agent:
		log.Info("this agent runs without a signature policy: the one it had put in force is no longer", "namespace", ns, "policy", inForce.Path)
		return own, p.SetPolicyInForce(ctx, runtime.PolicyInForce{By: req.Agent})
	case !ok:
		return own, nil
	case req.File == "":
		pol, err := LoadWith(inForce.Path, req.Options)
		if err != nil {
			err = fmt.Errorf("namespace %s: the signature policy in force, %s (put in force by %s), cannot be used:\n%w", ns, inForce.Path, inForce.By, err)
			if req.Writes {
				return own, err
			}
			log.Warn(err.Error())
			return own, nil
		}
		log.Debug("judging by the signature policy in force in the namespace", "namespace", ns, "policy", inForce.Path, "by", inForce.By)
		return Adoption{File: inForce.Path, Policy: pol, InForce: &inForce}, nil
	case req.File != inForce.Path && req.Writes:
		return own, &RefusedError{Holder: inForce, msg: fmt.Sprintf("namespace %s: %s put the signature policy %s in force; %s must judge by it: give --policy %s, or none", ns, inForce.By, inForce.Path, req.Caller, inForce.Path)}
	}
	return Adoption{File: req.File, InForce: &inForce}, nil
}

// claim is what the agent with a policy file does: it puts the file in
// force, or takes its own claim again, or judges by the same policy as the
// agent that holds the claim.
func claim(ctx context.Context, p runtime.Policies, req InForceRequest, inForce runtime.PolicyInForce, ok bool, log *slog.Logger) (Adoption, error) {
	ns := req.Namespace
	if ok && inForce.By != req.Agent {
		return judgeByOthers(req, inForce)
	}
	if ok && inForce.Path == req.File {
		log.Debug("taking again the claim on the namespace's signature policy", "namespace", ns, "policy", req.File)
	} else {
		log.Info("putting the signature policy in force in the namespace", "namespace", ns, "policy", req.File)
	}
	err := p.SetPolicyInForce(ctx, runtime.PolicyInForce{Path: req.File, By: req.Agent})
	if claimed := (*runtime.PolicyClaimedError)(nil); errors.As(err, &claimed) {
		// Another agent took the claim since it was read.
		return judgeByOthers(req, claimed.Holder)
	}
	return Adoption{File: req.File}, err
}

// judgeByOthers is what the agent with a policy file does where another
// agent holds the claim on the namespace's policy: it judges by the same
// policy, or is refused.
func judgeByOthers(req InForceRequest, holder runtime.PolicyInForce) (Adoption, error) {
	if holder.Path != req.File {
		return Adoption{File: req.File}, &RefusedError{Holder: holder, msg: fmt.Sprintf("namespace %s: %s put the signature policy %s in force; another agent on the namespace must judge by the same one: give --policy %s, or none", req.Namespace, holder.By, holder.Path, holder.Path)}
	}
	return Adoption{File: req.File, InForce: &holder}, nil
}

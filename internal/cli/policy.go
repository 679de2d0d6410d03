package cli

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/signature"
)

// useAnnotation says, on a command, how it uses the namespace beyond reading
// it: what the signature policy in force asks of it (signature.Adopt) and
// how long it has to stop (StopBound).
const useAnnotation = "holdfast.io/namespace"

var (
	// writes is the annotation of a command that names and pins images in
	// the namespace: it must judge by the signature policy in force there.
	writes = map[string]string{useAnnotation: "writes"}
	// claims is the agent's (run): it writes, and puts its own policy in
	// force in the namespace.
	claims = map[string]string{useAnnotation: "claims"}
)

// writer reports whether cmd names and pins images in the namespace.
func writer(cmd *cobra.Command) bool { return cmd.Annotations[useAnnotation] != "" }

// policyBy names the agent of this data dir, as the claim on a namespace's
// policy says who holds it.
func (o *options) policyBy() string { return "holdfast run, data dir " + o.dataDir }

// adoptPolicy makes command judge by the signature policy in force in the
// namespace (signature.Adopt); a refusal is bad usage.
func (o *options) adoptPolicy(ctx context.Context, s *session, command string) error {
	req := signature.InForceRequest{Namespace: s.rt.Namespace(), Caller: "holdfast " + command, Writes: o.use != "",
		File: o.policyFile, Options: signature.Options{InsecurePerms: o.insecurePerms}, Log: o.log}
	if o.use == claims[useAnnotation] {
		req.Agent = o.policyBy()
	}
	a, err := signature.Adopt(ctx, s.rt, req)
	if refused := (*signature.RefusedError)(nil); errors.As(err, &refused) {
		return &usageError{err}
	}
	if err != nil {
		return err
	}
	o.policyFile, o.policyInForce = a.File, a.InForce
	if a.Policy != nil {
		o.policy = a.Policy
	}
	return nil
}

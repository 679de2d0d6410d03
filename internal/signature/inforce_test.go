package signature

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// claimStore is the claim on a namespace's policy (runtime.Policies), as
// one atomic step: the holder takes it again, anyone else is refused.
type claimStore struct {
	held    *runtime.PolicyInForce
	readErr error
	// taken is a claim another agent takes between a read and a set.
	taken *runtime.PolicyInForce
	sets  []runtime.PolicyInForce
}

func (c *claimStore) PolicyInForce(context.Context) (runtime.PolicyInForce, bool, error) {
	if c.readErr != nil || c.held == nil {
		return runtime.PolicyInForce{}, false, c.readErr
	}
	return *c.held, true, nil
}

func (c *claimStore) SetPolicyInForce(_ context.Context, p runtime.PolicyInForce) error {
	if c.taken != nil {
		c.held, c.taken = c.taken, nil
	}
	if c.held != nil && c.held.By != p.By {
		return &runtime.PolicyClaimedError{Namespace: "k8s.io", Holder: *c.held}
	}
	c.sets = append(c.sets, p)
	if p.Path == "" {
		c.held = nil
		return nil
	}
	c.held = &p
	return nil
}

// TestAdopt: every way a command meets the policy in force in its
// namespace, for the agent, a command that writes and one that reads.
func TestAdopt(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "cosign.pub"), string(pemOf(t, key.Public())))
	good, other, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "other.yaml"), filepath.Join(dir, "bad.yaml")
	for _, p := range []string{good, other} {
		write(t, p, "mode: enforce\nrules:\n  - images: [\"*\"]\n    keys: [cosign.pub]\n")
	}
	write(t, bad, "mode: sometimes\n")
	const me, them = "holdfast run, data dir /var/lib/holdfast", "holdfast run, data dir /srv/other"
	mine := &runtime.PolicyInForce{Path: good, By: me}
	theirs := &runtime.PolicyInForce{Path: good, By: them}
	theirsBad := &runtime.PolicyInForce{Path: bad, By: them}
	readErr := errors.New("lease list: unavailable")
	agent := InForceRequest{Caller: "holdfast run", Writes: true, Agent: me}
	writer := InForceRequest{Caller: "holdfast import", Writes: true}
	reader := InForceRequest{Caller: "holdfast status"}
	with := func(r InForceRequest, file string) InForceRequest { r.File = file; return r }

	for _, c := range []struct {
		name    string
		store   claimStore
		req     InForceRequest
		want    Adoption
		loaded  bool   // Adoption.Policy is the policy in force, loaded
		sets    string // the claims set, as "path by; ..."
		wantErr string // in the error; a *RefusedError when refused is set
		refused bool
	}{
		{name: "unreadable claim refuses a writer", store: claimStore{readErr: readErr}, req: with(writer, good), want: Adoption{File: good}, wantErr: "unavailable"},
		{name: "unreadable claim only warns a reader", store: claimStore{readErr: readErr}, req: reader, want: Adoption{}},
		{name: "agent claims", req: with(agent, good), want: Adoption{File: good}, sets: good + " " + me},
		{name: "agent takes its claim again", store: claimStore{held: mine}, req: with(agent, good), want: Adoption{File: good}, sets: good + " " + me},
		{name: "agent changes its policy", store: claimStore{held: mine}, req: with(agent, other), want: Adoption{File: other}, sets: other + " " + me},
		{name: "agent judges by another's same policy", store: claimStore{held: theirs}, req: with(agent, good), want: Adoption{File: good, InForce: theirs}},
		{name: "agent refused another's other policy", store: claimStore{held: theirs}, req: with(agent, other), want: Adoption{File: other},
			wantErr: "namespace k8s.io: " + them + " put the signature policy " + good + " in force; another agent on the namespace must judge by the same one: give --policy " + good + ", or none", refused: true},
		{name: "agent loses the race to the same policy", store: claimStore{taken: theirs}, req: with(agent, good), want: Adoption{File: good, InForce: theirs}},
		{name: "agent loses the race to another policy", store: claimStore{taken: theirs}, req: with(agent, other), want: Adoption{File: other}, wantErr: "another agent on the namespace must judge by the same one", refused: true},
		{name: "agent without a policy withdraws its own", store: claimStore{held: mine}, req: agent, want: Adoption{}, sets: " " + me},
		{name: "agent without a policy judges by another's", store: claimStore{held: theirs}, req: agent, want: Adoption{File: good, InForce: theirs}, loaded: true},
		{name: "no policy in force", req: with(writer, good), want: Adoption{File: good}},
		{name: "nothing at all", req: reader, want: Adoption{}},
		{name: "writer judges by the one in force", store: claimStore{held: theirs}, req: writer, want: Adoption{File: good, InForce: theirs}, loaded: true},
		{name: "reader judges by the one in force", store: claimStore{held: theirs}, req: reader, want: Adoption{File: good, InForce: theirs}, loaded: true},
		{name: "writer refused a bad policy in force", store: claimStore{held: theirsBad}, req: writer, want: Adoption{},
			wantErr: "namespace k8s.io: the signature policy in force, " + bad + " (put in force by " + them + "), cannot be used:\n"},
		{name: "reader told of a bad policy in force", store: claimStore{held: theirsBad}, req: reader, want: Adoption{}},
		{name: "writer with the policy in force", store: claimStore{held: theirs}, req: with(writer, good), want: Adoption{File: good, InForce: theirs}},
		{name: "writer with another policy refused", store: claimStore{held: theirs}, req: with(writer, other), want: Adoption{File: other},
			wantErr: "namespace k8s.io: " + them + " put the signature policy " + good + " in force; holdfast import must judge by it: give --policy " + good + ", or none", refused: true},
		{name: "reader with another policy", store: claimStore{held: theirs}, req: with(reader, other), want: Adoption{File: other, InForce: theirs}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.req.Namespace = "k8s.io"
			got, err := Adopt(context.Background(), &c.store, c.req)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("error %v, want one saying %q", err, c.wantErr)
			}
			if refused := (*RefusedError)(nil); errors.As(err, &refused) != c.refused {
				t.Errorf("error %v: refused %v, want %v", err, !c.refused, c.refused)
			}
			if (got.Policy != nil) != c.loaded {
				t.Errorf("policy loaded: %v, want %v", got.Policy != nil, c.loaded)
			}
			if got.File != c.want.File || (got.InForce == nil) != (c.want.InForce == nil) || got.InForce != nil && *got.InForce != *c.want.InForce {
				t.Errorf("adopted %s in force %+v, want %s in force %+v", got.File, got.InForce, c.want.File, c.want.InForce)
			}
			var sets []string
			for _, s := range c.store.sets {
				sets = append(sets, s.Path+" "+s.By)
			}
			if got := strings.Join(sets, "; "); got != c.sets {
				t.Errorf("claims set %q, want %q", got, c.sets)
			}
		})
	}
}

package pass

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/reconcile"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/signature"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
)

// TestPolicyReloadKeepsAnUnchangedPolicy: a policy read again unchanged is
// equal to the last, rule keys included (its verdicts stay remembered); a
// changed one replaces it;
// a bad edit keeps the last good one and says so once.
func TestPolicyReloadKeepsAnUnchangedPolicy(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "k.pub"), sigtest.PublicPEM(t, sigtest.NewKey(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "policy.yaml")
	write := func(body string) {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("mode: enforce\nrules:\n  - images: [\"*\"]\n    keys: [k.pub]\n")
	p := New(fake.New(), Config{Policy: path})
	var sum Summary
	p.loadPolicy(&sum)
	first := p.sigs.judge.Policy
	if first == nil || len(sum.Failures) != 0 {
		t.Fatalf("policy %v, failures %v", first, sum.Failures)
	}
	p.loadPolicy(&sum)
	if again := p.sigs.judge.Policy; !reflect.DeepEqual(again, first) {
		t.Errorf("the same file read again is another policy (%+v, was %+v): its verdicts are forgotten", again, first)
	}
	write("mode: warn\nrules:\n  - images: [\"*\"]\n    keys: [k.pub]\n")
	p.loadPolicy(&sum)
	if p.sigs.judge.Policy == first || p.sigs.judge.Policy.Mode != "warn" {
		t.Errorf("a changed policy is not taken: %+v", p.sigs.judge.Policy)
	}
	good := p.sigs.judge.Policy
	write("mode: enforce\nrules:\n  - images: [\"*\"]\n    keys: [missing.pub]\n")
	p.loadPolicy(&sum)
	p.loadPolicy(&sum)
	if p.sigs.judge.Policy != good {
		t.Errorf("a bad edit replaced the last good policy")
	}
	if !strings.Contains(p.sigs.badErr, "missing.pub") || len(sum.Failures) != 0 {
		t.Errorf("bad edit: reported %q, failures %v", p.sigs.badErr, sum.Failures)
	}
	if n := len(p.journal.Report(0, true).Events); n != 1 {
		t.Errorf("%d events for one bad edit read twice, want 1", n)
	}
}

// TestPolicyReloadRefusesLooseKey: the reload before each pass judges the
// policy's files as a start does: a key made writable by others and
// rewritten is refused, the last good policy (with the key as it was)
// stays, and the warning names the key and its mode; with InsecurePerms the
// rewritten key is taken.
func TestPolicyReloadRefusesLooseKey(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "k.pub")
	good := sigtest.PublicPEM(t, sigtest.NewKey(t))
	if err := os.WriteFile(key, good, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte("mode: enforce\nrules:\n  - images: [\"*\"]\n    keys: [k.pub]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := New(fake.New(), Config{Policy: path})
	var sum Summary
	p.loadPolicy(&sum)
	first := p.sigs.judge.Policy
	if first == nil || len(sum.Failures) != 0 {
		t.Fatalf("policy %v, failures %v", first, sum.Failures)
	}

	forged := sigtest.PublicPEM(t, sigtest.NewKey(t))
	if err := os.Chmod(key, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, forged, 0o666); err != nil {
		t.Fatal(err)
	}
	p.loadPolicy(&sum)
	if p.sigs.judge.Policy != first || string(p.sigs.judge.Policy.Rules[0].Keys[0].PEM) != string(good) {
		t.Errorf("a rewritten key others may write was taken (the last good policy kept: %v)", p.sigs.judge.Policy == first)
	}
	if want := "key " + key + " is writable by others (mode 0666)"; !strings.Contains(p.sigs.badErr, want) || len(sum.Failures) != 0 {
		t.Errorf("reported %q, failures %v; want %q", p.sigs.badErr, sum.Failures, want)
	}

	insecure := New(fake.New(), Config{Policy: path, InsecurePerms: true})
	insecure.loadPolicy(&sum)
	if pol := insecure.sigs.judge.Policy; pol == nil || string(pol.Rules[0].Keys[0].PEM) != string(forged) {
		t.Errorf("InsecurePerms: policy read %v, failures %v; want the key as it is now", pol != nil, sum.Failures)
	}
}

// TestRefusalsAreTheLastPass: Refusal says why the last pass refused a name,
// and nothing once a pass refuses it no more, also when that pass has no
// policy at all (one taken away).
func TestRefusalsAreTheLastPass(t *testing.T) {
	p := New(fake.New(), Config{})
	var sum Summary
	refused := reconcile.Plan{Refusals: []reconcile.Refusal{{Name: "example.com/x:1", Reason: "unsigned", Source: "/images/x.tar"}}}
	p.reportSignatures(refused, map[string]signature.Verdict{}, &sum)
	if got := p.Refusal("example.com/x:1"); got != "unsigned" {
		t.Errorf("after a pass that refused it: %q, want unsigned", got)
	}
	p.reportSignatures(reconcile.Plan{}, nil, &sum)
	if got := p.Refusal("example.com/x:1"); got != "" {
		t.Errorf("after a pass without a policy: %q, want nothing", got)
	}
}

package pass

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
)

// TestPolicyReloadKeepsAnUnchangedPolicy: a policy read again unchanged is
// the same value (its verdicts stay remembered); a changed one replaces it;
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
	first := p.sigs.pol
	if first == nil || len(sum.Failures) != 0 {
		t.Fatalf("policy %v, failures %v", first, sum.Failures)
	}
	p.loadPolicy(&sum)
	if p.sigs.pol != first {
		t.Errorf("the same file read again is a new policy: its verdicts are forgotten")
	}
	write("mode: warn\nrules:\n  - images: [\"*\"]\n    keys: [k.pub]\n")
	p.loadPolicy(&sum)
	if p.sigs.pol == first || p.sigs.pol.Mode != "warn" {
		t.Errorf("a changed policy is not taken: %+v", p.sigs.pol)
	}
	good := p.sigs.pol
	write("mode: enforce\nrules:\n  - images: [\"*\"]\n    keys: [missing.pub]\n")
	p.loadPolicy(&sum)
	p.loadPolicy(&sum)
	if p.sigs.pol != good {
		t.Errorf("a bad edit replaced the last good policy")
	}
	if !strings.Contains(p.sigs.badErr, "missing.pub") || len(sum.Failures) != 0 {
		t.Errorf("bad edit: reported %q, failures %v", p.sigs.badErr, sum.Failures)
	}
	if n := len(p.journal.Report(0, true).Events); n != 1 {
		t.Errorf("%d events for one bad edit read twice, want 1", n)
	}
}

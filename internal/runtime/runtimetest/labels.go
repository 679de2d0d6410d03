package runtimetest

import (
	"maps"
	"testing"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// pinUnpinExactLabels: Unpin leaves a record holdfast does not own exactly
// as it was; a first Pin of a record a user pinned notes the prior pin, and
// Unpin then takes only holdfast's labels off; a record holdfast alone
// pinned loses both pins and nothing else. (The CRI's own label, which it
// adds when it likes, is not compared.)
func pinUnpinExactLabels(t *testing.T, s Store, name string) {
	b := s.Backend
	labels := func(n string) map[string]string {
		t.Helper()
		img, ok := record(t, b, n)
		if !ok {
			t.Fatalf("%s: no record", n)
		}
		l := maps.Clone(img.Labels)
		delete(l, runtime.LabelCRIManaged)
		return l
	}
	check := func(n, what string, want map[string]string) {
		t.Helper()
		if got := labels(n); !maps.Equal(got, want) {
			t.Errorf("%s: labels %v, want %v", what, got, want)
		}
	}
	userPin := map[string]string{runtime.LabelCRIPinned: runtime.PinnedValue, "owner": "ops"}

	foreign := name + "-foreign"
	b.CreateRecord(t, runtime.Image{Name: foreign, Target: b.Targets[0], Labels: maps.Clone(userPin)})
	unpin(t, b, foreign)
	check(foreign, "Unpin of a record holdfast does not own", userPin)

	prior := name + "-prior"
	b.CreateRecord(t, runtime.Image{Name: prior, Target: b.Targets[0], Labels: maps.Clone(userPin)})
	pin(t, b, runtime.Want{Name: prior, Target: b.Targets[0]}, true)
	check(prior, "a first Pin of a record the user pinned", map[string]string{runtime.LabelCRIPinned: runtime.PinnedValue, "owner": "ops",
		runtime.LabelPinned: runtime.PinnedValue, runtime.LabelPriorPin: "true"})
	unpin(t, b, prior)
	check(prior, "Unpin of a record the user pinned first", userPin)

	mine := name + "-mine"
	b.CreateRecord(t, runtime.Image{Name: mine, Target: b.Targets[0], Labels: map[string]string{"owner": "ops"}})
	pin(t, b, runtime.Want{Name: mine, Target: b.Targets[0]}, true)
	unpin(t, b, mine)
	check(mine, "Unpin of holdfast's own pin", map[string]string{"owner": "ops"})
}

package pass

import (
	"path/filepath"
	"strings"
	"testing"

	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
)

// TestMatchKept: release's arguments name kept sources by path (as given
// or absolute), by lease, or by a pattern of their images' names; one that
// names none is missing, one that is no pattern either is bad and chooses
// nothing.
func TestMatchKept(t *testing.T) {
	abs, err := filepath.Abs("app.tar")
	if err != nil {
		t.Fatal(err)
	}
	kept := []hfruntime.SourceState{
		{Lease: "holdfast/kept-app", Source: abs, Kept: true, Images: []hfruntime.Want{{Name: "example.com/app:1"}}},
		{Lease: "holdfast/kept-db", Source: "/srv/db.tar", Kept: true, Images: []hfruntime.Want{{Name: "example.com/db:1"}}},
	}
	leases := func(chosen []hfruntime.SourceState) string {
		var out []string
		for _, st := range chosen {
			out = append(out, st.Lease)
		}
		return strings.Join(out, ",")
	}
	chosen, missing, bad := MatchKept(kept, []string{"app.tar", "holdfast/kept-app", "example.com/*", "example.org/none"})
	if bad != nil || leases(chosen) != "holdfast/kept-app,holdfast/kept-db" || len(missing) != 1 || !strings.Contains(missing[0].Error(), "example.org/none") {
		t.Errorf("chosen %s, missing %v, bad %v; want both leases once and example.org/none missing", leases(chosen), missing, bad)
	}
	chosen, _, bad = MatchKept(kept, []string{"/srv/db.tar", "[bad"})
	if bad == nil || !strings.Contains(bad.Error(), `"[bad" is no kept source, and not a pattern`) || chosen != nil {
		t.Errorf("chosen %s, bad %v; want nothing chosen and [bad refused", leases(chosen), bad)
	}
}

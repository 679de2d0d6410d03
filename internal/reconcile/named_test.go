package reconcile

import (
	"testing"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// TestNamedNeverUnpinned: a record holdfast owns and no lease wants is
// unpinned, unless Named says a list still being written names it.
func TestNamedNeverUnpinned(t *testing.T) {
	in := Input{
		Present: present(),
		Unknown: func(string) bool { return false },
		Records: []runtime.Image{rec("fresh:1", "f", both), rec("lone:1", "l", both)},
	}
	if p := Diff(in); len(p.Unpins) != 2 {
		t.Fatalf("unpins %v; want both unwanted records", p.Unpins)
	}
	in.Named = func(name string) bool { return name == "fresh:1" }
	p := Diff(in)
	if len(p.Unpins) != 1 || p.Unpins[0].Name != "lone:1" {
		t.Errorf("unpins %v; want lone:1 only", p.Unpins)
	}
}

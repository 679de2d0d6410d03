package reconcile

import (
	"slices"
	"testing"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// TestRefusedIsNoClaim: a want the signature policy refuses is not pinned,
// an owned pin on its name is removed (reason refused), a pin holdfast does
// not own stays, and another source's want of the same name that is not
// refused wins; each refusal is listed, and Tagged leaves out the
// name@digest refusal of an image refused under its tag.
func TestRefusedIsNoClaim(t *testing.T) {
	in := Input{
		Leases: []runtime.SourceState{
			lease("L1", "/img/a.tar", "i1", 2, want("ok:1", "o"), want("bad:1", "b"), want("bad@"+target("b").Digest.String(), "b"), want("user:1", "u"), want("both:1", "x")),
			lease("L2", "/img/b.tar", "i2", 1, want("both:1", "y")),
		},
		Present: present("/img/a.tar", "i1", "/img/b.tar", "i2"),
		Records: []runtime.Image{rec("bad:1", "b", both), rec("user:1", "u", map[string]string{"io.cri-containerd.pinned": "pinned"})},
		Refused: func(w runtime.Want) (string, bool) {
			return "unsigned", w.Target.Digest != target("o").Digest && w.Target.Digest != target("y").Digest
		},
	}
	p := Diff(in)
	if _, ok := p.WantedNames["ok:1"]; !ok || len(p.WantedNames) != 2 {
		t.Errorf("wanted %v; want ok:1 and both:1", p.WantedNames)
	}
	if w := p.WantedNames["both:1"]; w.Target.Digest != target("y").Digest {
		t.Errorf("both:1 wanted at %s; want the not refused source's target", w.Target.Digest)
	}
	if len(p.Unpins) != 1 || p.Unpins[0].Name != "bad:1" || p.Unpins[0].Reason != ReasonRefused {
		t.Errorf("unpins %v; want bad:1 refused (user:1's pin is not holdfast's)", p.Unpins)
	}
	for _, pin := range p.Pins {
		if pin.Want.Name != "ok:1" && pin.Want.Name != "both:1" {
			t.Errorf("pins %s, which is refused", pin.Want.Name)
		}
	}
	if len(p.Refusals) != 4 {
		t.Errorf("refusals %v; want bad:1, its digest name, user:1 and L1's both:1", p.Refusals)
	}
	tagged := Tagged(p.Refusals)
	for _, r := range tagged {
		if r.Name == "bad@"+target("b").Digest.String() {
			t.Errorf("Tagged keeps %s, refused under bad:1 too", r.Name)
		}
	}
	if len(tagged) != 3 {
		t.Errorf("Tagged %v; want 3", tagged)
	}
}

// TestRefusedRecordsDeleted: under enforce a refused image has no name: the
// records holdfast made of it (tag and digest name) are deleted, not only
// unpinned; a record holdfast did not make is left (unpinned if holdfast
// pinned it) and listed as foreign; a made record re-pointed elsewhere, or
// whose name another source wants at a target the policy accepts, is not
// deleted.
func TestRefusedRecordsDeleted(t *testing.T) {
	made := map[string]string{"io.cri-containerd.pinned": "pinned", "io.holdfast.pinned": "pinned", runtime.LabelCreated: "true"}
	digestName := "bad@" + target("b").Digest.String()
	in := Input{
		Leases: []runtime.SourceState{
			lease("L1", "/img/a.tar", "i1", 2, want("bad:1", "b"), want(digestName, "b"), want("theirs:1", "b"), want("moved:1", "b"), want("both:1", "b")),
			lease("L2", "/img/b.tar", "i2", 1, want("both:1", "y")),
		},
		Present: present("/img/a.tar", "i1", "/img/b.tar", "i2"),
		Records: []runtime.Image{rec("bad:1", "b", made), rec(digestName, "b", made), rec("theirs:1", "b", both),
			rec("moved:1", "z", made), rec("both:1", "b", made)},
		Refused: func(w runtime.Want) (string, bool) { return "unsigned", w.Target.Digest == target("b").Digest },
	}
	p := Diff(in)
	var deleted []string
	for _, d := range p.Deletes {
		deleted = append(deleted, d.Name)
		if d.Reason != ReasonRefused || d.Target != target("b").Digest.String() {
			t.Errorf("delete %+v; want reason refused at the refused target", d)
		}
	}
	if want := []string{"bad:1", digestName}; !slices.Equal(deleted, want) {
		t.Errorf("deletes %v; want %v", deleted, want)
	}
	if !slices.Equal(p.Foreign, []string{"theirs:1"}) {
		t.Errorf("foreign %v; want theirs:1", p.Foreign)
	}
	var unpinned []string
	for _, u := range p.Unpins {
		unpinned = append(unpinned, u.Name)
	}
	if !slices.Equal(unpinned, []string{"moved:1", "theirs:1"}) {
		t.Errorf("unpins %v; want moved:1 (made, re-pointed) and theirs:1 (not made)", unpinned)
	}
	if w, ok := p.WantedNames["both:1"]; !ok || w.Target.Digest != target("y").Digest {
		t.Errorf("both:1 wanted at %v; want L2's target", w.Target.Digest)
	}
}

package reconcile

import (
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

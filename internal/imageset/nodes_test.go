package imageset

import (
	"slices"
	"testing"

	"github.com/holdfast-project/holdfast/internal/report"
)

func setState(name string, selected bool, phases map[string]Phase) report.SetState {
	s := report.SetState{Name: name, Selected: selected}
	for ref, ph := range phases {
		s.Images = append(s.Images, report.SetImage{Ref: ref, Phase: ph})
	}
	return s
}

// TestStatesSelectsByLabels: only the nodes the selector matches count, each with what its agent said of this set
// (not of another set), and a node that said nothing yet has nothing.
func TestStatesSelectsByLabels(t *testing.T) {
	set := ImageSet{Metadata: Meta{ObjectMeta: report.ObjectMeta{Name: "rel"}}, Spec: Spec{Images: []string{appA}, NodeSelector: map[string]string{"pool": "a"}}}
	nodes := []Node{
		{Name: "n1", Labels: map[string]string{"pool": "a"}, Sets: []report.SetState{setState("other", true, map[string]Phase{appA: Failed}), setState("rel", true, map[string]Phase{appA: Held})}},
		{Name: "n2", Labels: map[string]string{"pool": "b"}, Sets: []report.SetState{setState("rel", false, map[string]Phase{appA: Held})}},
		{Name: "n3", Labels: map[string]string{"pool": "a"}},
	}
	got := States(set, nodes)
	if len(got) != 2 || got[0].Node != "n1" || got[1].Node != "n3" {
		t.Fatalf("selected %+v, want n1 and n3", got)
	}
	if got[0].Images[appA].Phase != Held || len(got[1].Images) != 0 {
		t.Fatalf("states %+v, want n1 holding %s and n3 with nothing", got, appA)
	}
	st := Aggregate(set, got, t0)
	if st.Nodes.Selected != 2 || st.Nodes.Staged != 1 || st.MissingImages != 1 {
		t.Fatalf("status %+v, want 2 selected, 1 staged, 1 image missing", st.Nodes)
	}
}

// TestAdmitWaves: one holder (outside the selector) lets exactly one waiting node start; a node already pulling
// takes the place; a node outside the selector is never admitted; a second holder frees a second place.
func TestAdmitWaves(t *testing.T) {
	set := ImageSet{Metadata: Meta{ObjectMeta: report.ObjectMeta{Name: "rel"}}, Spec: Spec{Images: []string{appA}, NodeSelector: map[string]string{"pool": "a"}}}
	sel := map[string]string{"pool": "a"}
	nodes := []Node{
		{Name: "seed", Labels: map[string]string{"pool": "b"}, Sets: []report.SetState{setState("rel", false, map[string]Phase{appA: Held})}},
		{Name: "w1", Labels: sel}, {Name: "w2", Labels: sel}, {Name: "w3", Labels: sel},
	}
	var admitted []string
	for _, n := range nodes {
		if got := Admit(n.Name, set, nodes); len(got) > 0 {
			if !slices.Equal(got, []string{appA}) {
				t.Fatalf("%s admitted %v", n.Name, got)
			}
			admitted = append(admitted, n.Name)
		}
	}
	if len(admitted) != 1 || admitted[0] == "seed" {
		t.Fatalf("admitted %v, want exactly one selected waiting node", admitted)
	}
	for i := range nodes {
		if nodes[i].Name == admitted[0] {
			nodes[i].Sets = []report.SetState{setState("rel", true, map[string]Phase{appA: Pulling})}
		}
	}
	for _, n := range nodes {
		if got := Admit(n.Name, set, nodes); len(got) > 0 && n.Name != admitted[0] {
			t.Fatalf("%s admitted %v while %s pulls from the one holder", n.Name, got, admitted[0])
		}
	}
	for i := range nodes {
		if nodes[i].Name == admitted[0] {
			nodes[i].Sets = []report.SetState{setState("rel", true, map[string]Phase{appA: Held})}
		}
	}
	second := 0
	for _, n := range nodes {
		if len(Admit(n.Name, set, nodes)) > 0 {
			second++
		}
	}
	if second != 2 {
		t.Fatalf("%d nodes admitted with two holders and two waiting, want 2", second)
	}
	// Labels unknown (a reporter reads no other Node): what each agent says of its selection counts.
	unknown := []Node{
		{Name: "seed", Sets: []report.SetState{setState("rel", false, map[string]Phase{appA: Held})}},
		{Name: "in", Sets: []report.SetState{setState("rel", true, map[string]Phase{appA: Waiting})}},
		{Name: "out", Sets: []report.SetState{setState("rel", false, nil)}},
	}
	if got := Admit("in", set, unknown); !slices.Equal(got, []string{appA}) {
		t.Fatalf("a node its agent says is selected admitted %v, want %s", got, appA)
	}
	if got := Admit("out", set, unknown); got != nil {
		t.Fatalf("a node its agent says is not selected admitted %v", got)
	}
	if got := States(set, unknown); len(got) != 1 || got[0].Node != "in" {
		t.Fatalf("states %+v, want the one node its agent says is selected", got)
	}
}

// TestShortNames: a set that writes an image as the kubelet's short name finds the agent's word on it under the
// full name, and the other way round; the status names the image as the set writes it.
func TestShortNames(t *testing.T) {
	set := ImageSet{Metadata: Meta{ObjectMeta: report.ObjectMeta{Name: "rel"}}, Spec: Spec{Images: []string{"nginx:1.27", "docker.io/library/redis:7"}}}
	nodes := []Node{
		{Name: "n1", Sets: []report.SetState{setState("rel", true, map[string]Phase{"docker.io/library/nginx:1.27": Held, "redis:7": Held})}},
		{Name: "n2", Sets: []report.SetState{setState("rel", true, map[string]Phase{"docker.io/library/nginx:1.27": Waiting, "redis:7": Held})}},
	}
	st := Aggregate(set, States(set, nodes), t0)
	if st.Nodes.Staged != 1 || st.MissingImages != 1 || st.Missing[0].Image != "nginx:1.27" || st.Missing[0].Nodes != 1 {
		t.Fatalf("status %+v, want n1 staged and nginx:1.27 missing on n2", st)
	}
	if got := Admit("n2", set, nodes); !slices.Equal(got, []string{"nginx:1.27"}) {
		t.Fatalf("n2 admitted %v, want nginx:1.27 (n1 holds it under its full name)", got)
	}
}

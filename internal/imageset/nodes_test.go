package imageset

import (
	"fmt"
	"math/rand"
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

// admissionsByMaps is Admissions as first written, one map per node, asking Place of every image: the oracle the
// faster one is checked against.
func admissionsByMaps(node string, set ImageSet, nodes []Node) []Admission {
	memo := map[string]string{}
	states := make([]map[string]ImageState, len(nodes))
	selected := make([]bool, len(nodes))
	found := false
	for i := range nodes {
		states[i] = nodes[i].images(set.Metadata.Name, memo)
		selected[i] = nodes[i].selectedBy(set)
		found = found || (nodes[i].Name == node && selected[i])
	}
	if !found {
		return nil
	}
	mirrors := mirrorNodes(nodes)
	var out []Admission
	for _, img := range uniqueSorted(set.Spec.Images) {
		var holders, pulling, waiting []string
		sentTo := map[string]string{}
		for i, n := range nodes {
			st := states[i][Normalize(img)]
			if h := mirrors[st.From]; h != "" {
				sentTo[n.Name] = h
			}
			switch {
			case st.Phase == Held:
				holders = append(holders, n.Name)
			case !selected[i]:
			case st.Phase == Pulling:
				pulling = append(pulling, n.Name)
			case st.Phase == Waiting || st.Phase == "":
				waiting = append(waiting, n.Name)
			}
		}
		if from, ok := Place(node, img, holders, pulling, waiting, sentTo, set.Spec.Concurrency()); ok {
			out = append(out, Admission{Image: img, From: from})
		}
	}
	return out
}

// rollout is n nodes in the middle of spreading a set of k images: phases drawn at random (seeded), some nodes
// outside the selector, some references written short, some said twice.
func rollout(n, k int, seed int64) (ImageSet, []Node) {
	r := rand.New(rand.NewSource(seed))
	set := ImageSet{Metadata: Meta{ObjectMeta: report.ObjectMeta{Name: "rel"}}, Spec: Spec{MaxConcurrent: 1 + r.Intn(n)}}
	for i := range k {
		set.Spec.Images = append(set.Spec.Images, fmt.Sprintf("registry.example/team%d/app-%d:1.%d", i%7, i, i))
	}
	set.Spec.Images = append(set.Spec.Images, "nginx:1.27", "docker.io/library/nginx:1.27")
	phases := []Phase{Held, Pulling, Failed, Waiting, ""}
	nodes := make([]Node, n)
	for i := range nodes {
		st := report.SetState{Name: "rel", Selected: r.Intn(10) > 0}
		for _, img := range set.Spec.Images {
			ph := phases[r.Intn(len(phases))]
			if ph == "" {
				continue
			}
			si := report.SetImage{Ref: Normalize(img), Phase: ph}
			if (ph == Held || ph == Pulling) && r.Intn(3) > 0 {
				// sent to a holder: mostly one of the first few nodes (so that some served MaxServe), now
				// and then to a mirror no node names
				si.From = fmt.Sprintf("http://10.0.0.%d:30020", r.Intn(min(n, 6)+1))
			}
			st.Images = append(st.Images, si)
		}
		if r.Intn(4) == 0 && len(st.Images) > 0 {
			st.Images = append(st.Images, st.Images[0])
		}
		nodes[i] = Node{Name: fmt.Sprintf("node-%04d", i), Sets: []report.SetState{{Name: "other", Selected: true}, st},
			PeerMirror: fmt.Sprintf("http://10.0.0.%d:30020", i)}
	}
	return set, nodes
}

// TestAdmissionsAsByMaps: the one-pass Admissions answers every node of many random rollouts exactly as the
// oracle does.
func TestAdmissionsAsByMaps(t *testing.T) {
	for seed := int64(1); seed <= 40; seed++ {
		set, nodes := rollout(30, 25, seed)
		for _, n := range nodes {
			got, want := Admissions(n.Name, set, nodes), admissionsByMaps(n.Name, set, nodes)
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d node %s: admissions %v, want %v", seed, n.Name, got, want)
			}
		}
	}
}

// BenchmarkAdmissions: what each reporter computes on a change during a rollout, 1,000 nodes of a 500-image set,
// one pass against the map-per-node oracle (go test -bench Admissions ./internal/imageset).
// Two moments: mid-rollout (phases at random) and its start (one node holds every image, the others wait).
func BenchmarkAdmissions(b *testing.B) {
	set, mid := rollout(1000, 500, 7)
	start := make([]Node, len(mid))
	for i := range start {
		st := report.SetState{Name: "rel", Selected: true}
		for _, img := range set.Spec.Images {
			ph := Waiting
			if i == 0 {
				ph = Held
			}
			st.Images = append(st.Images, report.SetImage{Ref: Normalize(img), Phase: ph})
		}
		start[i] = Node{Name: mid[i].Name, Sets: []report.SetState{st}}
	}
	for _, moment := range []struct {
		name  string
		nodes []Node
	}{{"mid", mid}, {"start", start}} {
		b.Run(moment.name+"/one-pass", func(b *testing.B) {
			for b.Loop() {
				Admissions(moment.nodes[3].Name, set, moment.nodes)
			}
		})
		b.Run(moment.name+"/maps-per-node", func(b *testing.B) {
			for b.Loop() {
				admissionsByMaps(moment.nodes[3].Name, set, moment.nodes)
			}
		})
	}
}

package reporter

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/holdfast-project/holdfast/internal/imageset"
	"github.com/holdfast-project/holdfast/internal/report"
)

// Each pull of a wave is sent to a holder of its own: two holders, two
// waiting nodes, each admitted from another holder's peer mirror; a holder
// that names no mirror gives its puller no From.
func TestStageSetsFromTheirHolders(t *testing.T) {
	set := imageset.ImageSet{Metadata: imageset.Meta{ObjectMeta: report.ObjectMeta{Name: "release"}}, Spec: imageset.Spec{Images: []string{imgA}}}
	phase := map[string]report.SetPhase{"h1": report.SetHeld, "h2": report.SetHeld, "w1": report.SetWaiting, "w2": report.SetWaiting}
	var nodes []imageset.Node
	for _, n := range slices.Sorted(maps.Keys(phase)) {
		nodes = append(nodes, imageset.Node{Name: n, Sets: []report.SetState{state("release", true, map[string]report.SetPhase{imgA: phase[n]})}})
	}
	mirrors := map[string]string{"h1": "http://10.0.0.1:30020", "h2": "http://10.0.0.2:30020"}
	from := map[string]string{}
	for _, n := range []string{"w1", "w2"} {
		s := stageSets(n, nil, []imageset.ImageSet{set}, nodes, mirrors).Sets[0]
		if !slices.Equal(s.MayPull, []string{imgA}) || len(s.From) != 1 || s.From[imgA] == "" {
			t.Fatalf("%s: may pull %v from %v, want %s from a holder's mirror", n, s.MayPull, s.From, imgA)
		}
		from[n] = s.From[imgA]
	}
	if from["w1"] == from["w2"] {
		t.Errorf("both pullers sent to %s, want one holder each", from["w1"])
	}
	delete(mirrors, "h2")
	for _, n := range []string{"w1", "w2"} {
		s := stageSets(n, nil, []imageset.ImageSet{set}, nodes, mirrors).Sets[0]
		if m, ok := s.From[imgA]; ok && m != mirrors["h1"] {
			t.Errorf("%s: from %q with h2 naming no mirror, want h1's or none", n, m)
		}
	}
}

// nodeImagesWithMirror is nodeImagesObj naming the node's peer mirror.
func nodeImagesWithMirror(t *testing.T, node, mirror string, sets ...report.SetState) *unstructured.Unstructured {
	t.Helper()
	data, err := json.Marshal(report.NodeImages{APIVersion: report.APIVersion, Kind: report.Kind,
		Metadata: report.ObjectMeta{Name: node}, Held: []byte("x"), Sets: sets, PeerMirror: mirror})
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	return u
}

// The reporter sends its agent the holder's peer mirror (from the holder's
// NodeImages) with the image it may pull, and writes its own agent's peer
// mirror into its node's NodeImages.
func TestSetsFromTheHoldersMirror(t *testing.T) {
	const holderMirror, ownMirror = "http://10.0.0.2:30020", "http://10.0.0.1:30020"
	agent := newSetsAgent(t)
	agent.mirror = ownMirror
	agent.sets = []report.SetState{state("release", true, map[string]report.SetPhase{imgA: report.SetWaiting})}
	dyn := newDynamic(t, setObj("release", 1, nil, imgA),
		nodeImagesWithMirror(t, "holder", holderMirror, state("release", true, map[string]report.SetPhase{imgA: report.SetHeld})),
		nodeImagesWithMirror(t, nodeName, "", state("release", true, map[string]report.SetPhase{imgA: report.SetWaiting})))
	var ap applies
	r := New(fake.NewClientset(labelledNode()), Config{Agent: agent.srv.URL, Node: nodeName, Interval: 50 * time.Millisecond,
		Debounce: 10 * time.Millisecond, Required: true, ImageSets: true, Dynamic: dyn, Apply: ap.apply})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	agent.waitPut(t, 0, "with the holder's mirror", func(s report.StageSets) bool {
		return len(s.Sets) == 1 && slices.Equal(s.Sets[0].MayPull, []string{imgA}) && s.Sets[0].From[imgA] == holderMirror
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && (ap.count() == 0 || ap.last(t).PeerMirror == "") {
		time.Sleep(10 * time.Millisecond)
	}
	if got := ap.last(t).PeerMirror; got != ownMirror {
		t.Errorf("NodeImages names the peer mirror %q, want the agent's %q", got, ownMirror)
	}
}

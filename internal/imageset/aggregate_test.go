package imageset

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

var (
	t0 = time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	t1 = t0.Add(time.Minute)
)

const (
	appA = "registry.example/app:1"
	appB = "registry.example/db:2"
)

func node(name string, states map[string]ImageState) NodeState {
	return NodeState{Node: name, Images: states}
}

var heldBoth = map[string]ImageState{appA: {Phase: Held}, appB: {Phase: Held}}

func newSet(images ...string) ImageSet {
	s := ImageSet{APIVersion: "holdfast.io/v1alpha1", Kind: Kind, Spec: Spec{Images: images}}
	s.Metadata.Name, s.Metadata.Generation = "release-7", 3
	return s
}

func cond(st Status, typ string) Condition {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return Condition{}
}

func TestAggregate(t *testing.T) {
	failB := map[string]ImageState{appA: {Phase: Held}, appB: {Phase: Failed, Error: "no peer serves it: dial tcp 10.0.0.2:5000: refused", Since: t0}}
	cases := []struct {
		name                 string
		images               []string
		nodes                []NodeState
		staged, progressing  string // statuses
		reason               string // Progressing's
		message              string // in Progressing's
		selected, ok, failed int
		missing              []MissingImage
		failures             []Failure
	}{
		{name: "staged", images: []string{appB, appA, appA}, nodes: []NodeState{node("n2", heldBoth), node("n1", heldBoth)},
			staged: True, progressing: False, reason: "Staged", selected: 2, ok: 2},
		{name: "no images is staged", nodes: []NodeState{node("n1", nil)}, staged: True, progressing: False, reason: "Staged", selected: 1, ok: 1},
		{name: "no node selected", images: []string{appA}, staged: False, progressing: False, reason: "NoNodesSelected", message: "matches no node"},
		{name: "pulling", images: []string{appA, appB}, nodes: []NodeState{node("n1", heldBoth), node("n2", map[string]ImageState{appA: {Phase: Held}, appB: {Phase: Pulling}})},
			staged: False, progressing: True, reason: "Pulling", message: "1 images still spreading to 1 nodes", selected: 2, ok: 1,
			missing: []MissingImage{{Image: appB, Nodes: 1, NodeNames: []string{"n2"}}}},
		{name: "failed node named with its error", images: []string{appA, appB}, nodes: []NodeState{node("n1", heldBoth), node("n2", failB), node("n3", nil)},
			staged: False, progressing: True, reason: "Failing", message: "n2 " + appB + ": no peer serves it", selected: 3, ok: 1, failed: 1,
			missing:  []MissingImage{{Image: appA, Nodes: 1, NodeNames: []string{"n3"}}, {Image: appB, Nodes: 2, NodeNames: []string{"n2", "n3"}}},
			failures: []Failure{{Node: "n2", Image: appB, Error: failB[appB].Error, Since: t0}}},
		{name: "image missing everywhere", images: []string{appA, appB}, nodes: []NodeState{node("n1", map[string]ImageState{appA: {Phase: Held}}), node("n2", failB)},
			staged: False, progressing: True, reason: "MissingEverywhere", message: "missing everywhere (held by no selected node): " + appB, selected: 2, failed: 1,
			missing:  []MissingImage{{Image: appB, Nodes: 2, NodeNames: []string{"n1", "n2"}}},
			failures: []Failure{{Node: "n2", Image: appB, Error: failB[appB].Error, Since: t0}}},
		{name: "images not of the set count for nothing", images: []string{appA}, nodes: []NodeState{node("n1", map[string]ImageState{appA: {Phase: Held}, "other:1": {Phase: Failed, Error: "x"}})},
			staged: True, progressing: False, reason: "Staged", selected: 1, ok: 1},
	}
	for _, c := range cases {
		set := newSet(c.images...)
		st := Aggregate(set, c.nodes, t1)
		s, p := cond(st, Staged), cond(st, Progressing)
		if s.Status != c.staged || p.Status != c.progressing || p.Reason != c.reason || !strings.Contains(p.Message, c.message) {
			t.Errorf("%s: Staged %s, Progressing %s %s %q; want %s, %s %s containing %q", c.name, s.Status, p.Status, p.Reason, p.Message, c.staged, c.progressing, c.reason, c.message)
		}
		if s.ObservedGeneration != 3 || p.ObservedGeneration != 3 || !s.LastTransitionTime.Equal(t1) {
			t.Errorf("%s: generation %d/%d, time %v", c.name, s.ObservedGeneration, p.ObservedGeneration, s.LastTransitionTime)
		}
		if want := (NodeCounts{Selected: c.selected, Staged: c.ok, Failed: c.failed}); st.Nodes != want {
			t.Errorf("%s: nodes %+v, want %+v", c.name, st.Nodes, want)
		}
		if !reflect.DeepEqual(st.Missing, c.missing) || st.MissingImages != len(c.missing) {
			t.Errorf("%s: missing %d %+v, want %+v", c.name, st.MissingImages, st.Missing, c.missing)
		}
		if !reflect.DeepEqual(st.Failures, c.failures) || st.FailureCount != len(c.failures) {
			t.Errorf("%s: failures %d %+v, want %+v", c.name, st.FailureCount, st.Failures, c.failures)
		}
	}
}

// TestAggregateNodeLeft: a node that left the selector leaves the status,
// its failure with it, and the set is staged on those that stay.
func TestAggregateNodeLeft(t *testing.T) {
	set := newSet(appA)
	set.Status = Aggregate(set, []NodeState{node("n1", map[string]ImageState{appA: {Phase: Held}}), node("gone", map[string]ImageState{appA: {Phase: Failed, Error: "boom", Since: t0}})}, t0)
	if set.Status.FailureCount != 1 || cond(set.Status, Staged).Status != False {
		t.Fatalf("before: %+v", set.Status)
	}
	st := Aggregate(set, []NodeState{node("n1", map[string]ImageState{appA: {Phase: Held}})}, t1)
	if st.FailureCount != 0 || len(st.Failures) != 0 || st.Nodes != (NodeCounts{Selected: 1, Staged: 1}) || cond(st, Staged).Status != True {
		t.Errorf("after the node left: %+v", st)
	}
}

// TestAggregateTransitions: a condition's time moves only with its status,
// and an unchanged input gives an equal status, whenever computed.
func TestAggregateTransitions(t *testing.T) {
	set := newSet(appA)
	pulling := []NodeState{node("n1", map[string]ImageState{appA: {Phase: Held}}), node("n2", map[string]ImageState{appA: {Phase: Pulling}})}
	set.Status = Aggregate(set, pulling, t0)
	again := Aggregate(set, pulling, t1)
	if !reflect.DeepEqual(again, set.Status) {
		t.Errorf("unchanged input, changed status:\n%+v\n%+v", set.Status, again)
	}
	failing := []NodeState{pulling[0], node("n2", map[string]ImageState{appA: {Phase: Failed, Error: "e", Since: t0}})}
	st := Aggregate(set, failing, t1)
	if p := cond(st, Progressing); p.Reason != "Failing" || !p.LastTransitionTime.Equal(t0) {
		t.Errorf("reason changed, status not: %+v, want time %v", p, t0)
	}
	set.Status = st
	t2 := t1.Add(time.Minute + 500*time.Millisecond)
	st = Aggregate(set, []NodeState{pulling[0], pulling[0]}, t2) // n1 twice: one node
	s, p := cond(st, Staged), cond(st, Progressing)
	if s.Status != True || !s.LastTransitionTime.Equal(t2.Truncate(time.Second)) || p.Status != False || !p.LastTransitionTime.Equal(t2.Truncate(time.Second)) {
		t.Errorf("staged: %+v %+v, want both moved to %v", s, p, t2.Truncate(time.Second))
	}
	// The status goes through JSON (the API server) and back unchanged,
	// so that the leader compares what it reads with what it computes.
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back Status
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, st) {
		t.Errorf("JSON round trip changed the status:\n%+v\n%+v", st, back)
	}
}

// TestAggregateBounds: the lists are cut, the counts stay whole.
func TestAggregateBounds(t *testing.T) {
	images := make([]string, MaxMissing+20)
	for i := range images {
		images[i] = fmt.Sprintf("registry.example/img-%03d:1", i)
	}
	set := newSet(images...)
	long := strings.Repeat("é", MaxErrorLen)
	var nodes []NodeState
	for i := range MaxMissingNodes + 5 {
		nodes = append(nodes, node(fmt.Sprintf("n%02d", i), map[string]ImageState{images[0]: {Phase: Failed, Error: long, Since: t0}}))
	}
	nodes = append(nodes, node("holder", map[string]ImageState{images[1]: {Phase: Held}}))
	for i := range MaxFailures {
		nodes = append(nodes, node(fmt.Sprintf("z%03d", i), map[string]ImageState{images[2]: {Phase: Failed, Error: "x", Since: t0}}))
	}
	st := Aggregate(set, nodes, t1)
	if st.MissingImages != len(images) || len(st.Missing) != MaxMissing {
		t.Errorf("missing: %d counted, %d listed", st.MissingImages, len(st.Missing))
	}
	if m := st.Missing[0]; m.Nodes != len(nodes) || len(m.NodeNames) != MaxMissingNodes || m.NodeNames[0] != "holder" {
		t.Errorf("first missing image: %d nodes, names %v", m.Nodes, m.NodeNames)
	}
	if st.Missing[1].Nodes != len(nodes)-1 {
		t.Errorf("held image missing on %d nodes, want %d", st.Missing[1].Nodes, len(nodes)-1)
	}
	if want := MaxMissingNodes + 5 + MaxFailures; st.FailureCount != want || len(st.Failures) != MaxFailures || st.Nodes.Failed != want {
		t.Errorf("failures: %d counted, %d listed, %d nodes failed; want %d, %d", st.FailureCount, len(st.Failures), st.Nodes.Failed, want, MaxFailures)
	}
	if e := st.Failures[0].Error; len(e) > MaxErrorLen+len("…") || !strings.HasSuffix(e, "…") || !strings.HasPrefix(e, "éé") || strings.ContainsRune(e, '\uFFFD') {
		t.Errorf("error not cut at a rune: %d bytes %q", len(e), e[len(e)-8:])
	}
	if p := cond(st, Progressing); !strings.Contains(p.Message, "and 114 more") {
		t.Errorf("message not bounded: %q", p.Message)
	}
}

func TestSpec(t *testing.T) {
	s := Spec{NodeSelector: map[string]string{"role": "worker"}}
	if !s.Selects(map[string]string{"role": "worker", "zone": "a"}) || s.Selects(map[string]string{"role": "master"}) || s.Selects(nil) {
		t.Error("selector")
	}
	if !(Spec{}).Selects(nil) {
		t.Error("an empty selector selects every node")
	}
	if (Spec{}).Concurrency() != DefaultMaxConcurrent || (Spec{MaxConcurrent: 3}).Concurrency() != 3 {
		t.Error("concurrency")
	}
}

package reporter

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/holdfast-project/holdfast/internal/imageset"
	"github.com/holdfast-project/holdfast/internal/report"
)

// setsAgent stands in for the agent: it records the bodies PUT to /sets,
// takes any PUT /required, and serves a /report whose Sets are, once sets
// came and until restart, what the test says (or, when it says nothing,
// each set it took, its images Waiting).
type setsAgent struct {
	mu     sync.Mutex
	puts   []report.StageSets
	taken  bool
	sets   []report.SetState
	mirror string // the report's PeerMirror
	srv    *httptest.Server
}

func newSetsAgent(t *testing.T) *setsAgent {
	a := &setsAgent{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		switch {
		case r.URL.Path == "/sets" && r.Method == http.MethodPut:
			var s report.StageSets
			if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
				http.Error(w, "bad sets", http.StatusBadRequest)
				return
			}
			a.puts, a.taken = append(a.puts, s), true
			w.WriteHeader(http.StatusNoContent)
		case r.URL.Path == "/required" && r.Method == http.MethodPut:
			w.WriteHeader(http.StatusNoContent)
		case r.URL.Path == "/held":
			_, _ = w.Write(nil)
		case r.URL.Path == "/report":
			rep := report.Report{Ready: true, Next: 1, Required: &report.Required{Known: true, Ready: true}, PeerMirror: a.mirror}
			if a.taken {
				rep.Sets = a.sets
				if rep.Sets == nil {
					rep.Sets = []report.SetState{}
				}
			}
			_ = json.NewEncoder(w).Encode(rep)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *setsAgent) bodies() []report.StageSets {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.puts)
}

// restart forgets the sets, as a new agent process does.
func (a *setsAgent) restart() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.taken = false
}

// waitPut waits for a PUT /sets after the first after that ok likes, and
// returns it and the count of PUTs up to it.
func (a *setsAgent) waitPut(t *testing.T, after int, what string, ok func(report.StageSets) bool) (report.StageSets, int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		puts := a.bodies()
		for i := after; i < len(puts); i++ {
			if ok(puts[i]) {
				return puts[i], i + 1
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no PUT /sets %s; the agent got %+v", what, a.bodies())
	return report.StageSets{}, 0
}

// setObj is an ImageSet as the API server serves it.
func setObj(name string, gen int64, selector map[string]string, images ...string) *unstructured.Unstructured {
	sel := map[string]any{}
	for k, v := range selector {
		sel[k] = v
	}
	imgs := make([]any, len(images))
	for i, s := range images {
		imgs[i] = s
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": report.APIVersion, "kind": imageset.Kind,
		"spec": map[string]any{"images": imgs, "nodeSelector": sel},
	}}
	u.SetName(name)
	u.SetGeneration(gen)
	return u
}

// nodeImagesObj is a node's NodeImages with what its agent says of the sets.
func nodeImagesObj(t *testing.T, node string, sets ...report.SetState) *unstructured.Unstructured {
	t.Helper()
	data, err := json.Marshal(report.NodeImages{APIVersion: report.APIVersion, Kind: report.Kind,
		Metadata: report.ObjectMeta{Name: node}, Held: []byte("x"), Sets: sets})
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	return u
}

// newDynamic is a fake dynamic client holding objs, each created under its
// resource (the fake would guess "nodeimageses" from the kind).
func newDynamic(t *testing.T, objs ...*unstructured.Unstructured) *dynamicfake.FakeDynamicClient {
	t.Helper()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{imageSetsGVR: "ImageSetList", nodeImagesGVR: "NodeImagesList"})
	for _, o := range objs {
		gvr := imageSetsGVR
		if o.GetKind() == report.Kind {
			gvr = nodeImagesGVR
		}
		if _, err := dyn.Resource(gvr).Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return dyn
}

// runCaches runs a reporter process's caches over the fakes until the test
// ends.
func runCaches(t *testing.T, client kubernetes.Interface, dyn dynamic.Interface) *setCaches {
	t.Helper()
	c := newSetCaches(client, dyn)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

func state(name string, selected bool, phases map[string]report.SetPhase) report.SetState {
	s := report.SetState{Name: name, Generation: 1, Selected: selected}
	for _, ref := range slices.Sorted(func(yield func(string) bool) {
		for k := range phases {
			if !yield(k) {
				return
			}
		}
	}) {
		s.Images = append(s.Images, report.SetImage{Ref: ref, Phase: phases[ref]})
	}
	return s
}

const imgA = "docker.io/library/a:1"

// One holder serves one peer at a time: of two nodes waiting, one may pull.
func TestStageSetsOneHolderOneAdmitted(t *testing.T) {
	set := imageset.ImageSet{Metadata: imageset.Meta{ObjectMeta: report.ObjectMeta{Name: "release"}, Generation: 3},
		Spec: imageset.Spec{Images: []string{imgA}}}
	nodes := []imageset.Node{
		{Name: "n1", Sets: []report.SetState{state("release", true, map[string]report.SetPhase{imgA: report.SetHeld})}},
		{Name: "n2", Sets: []report.SetState{state("release", true, map[string]report.SetPhase{imgA: report.SetWaiting})}},
		{Name: "n3", Sets: []report.SetState{state("release", true, map[string]report.SetPhase{imgA: report.SetWaiting})}},
	}
	admitted := 0
	for _, n := range []string{"n1", "n2", "n3"} {
		got := stageSets(n, map[string]string{}, []imageset.ImageSet{set}, nodes, nil)
		if len(got.Sets) != 1 || got.Sets[0].Name != "release" || got.Sets[0].Generation != 3 || !got.Sets[0].Selected ||
			!slices.Equal(got.Sets[0].Images, []string{imgA}) {
			t.Fatalf("%s: %+v", n, got)
		}
		if len(got.Sets[0].MayPull) > 0 {
			if n == "n1" {
				t.Errorf("the holder n1 may pull %v", got.Sets[0].MayPull)
			}
			admitted++
		}
	}
	if admitted != 1 {
		t.Errorf("%d nodes admitted to pull from one holder, want 1", admitted)
	}

	// A selector that does not match the node's labels: not selected, nothing to pull.
	set.Spec.NodeSelector = map[string]string{"tier": "web"}
	for _, n := range []string{"n2", "n3"} {
		got := stageSets(n, map[string]string{"tier": "db"}, []imageset.ImageSet{set}, nodes, nil)
		if got.Sets[0].Selected || got.Sets[0].MayPull != nil {
			t.Errorf("%s of another tier: %+v", n, got.Sets[0])
		}
	}
}

// A holder the waves sent imageset.MaxServe pulls to rests while another
// can serve: the cache's NodeImages carry each node's peer mirror and the
// holder each pull was sent to, and the next pull goes to the other holder
// (without the rest, the three pulls under way would fill both holders).
func TestStageSetsRestAHolderThatServedThree(t *testing.T) {
	set := imageset.ImageSet{Metadata: imageset.Meta{ObjectMeta: report.ObjectMeta{Name: "release"}, Generation: 1},
		Spec: imageset.Spec{Images: []string{imgA}}}
	mirror := func(n string) string { return "http://" + n + ":30020" }
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	add := func(name string, ph report.SetPhase, from string) {
		st := state("release", true, map[string]report.SetPhase{imgA: ph})
		st.Images[0].From = from
		if err := store.Add(&nodeSets{ObjectMeta: metav1.ObjectMeta{Name: name}, Sets: []report.SetState{st}, PeerMirror: mirror(name)}); err != nil {
			t.Fatal(err)
		}
	}
	add("seed", report.SetHeld, "")
	add("h2", report.SetHeld, mirror("seed"))
	for _, n := range []string{"p1", "p2", "p3"} {
		add(n, report.SetPulling, mirror("seed"))
	}
	add("w", report.SetWaiting, "")
	nodes := cachedNodes(store, func(string) map[string]string { return nil })
	got := stageSets("w", map[string]string{}, []imageset.ImageSet{set}, nodes, peerMirrors(store))
	if s := got.Sets[0]; !slices.Equal(s.MayPull, []string{imgA}) || s.From[imgA] != mirror("h2") {
		t.Errorf("w may pull %v from %v; want %s from %s (the seed served %d)", s.MayPull, s.From, imgA, mirror("h2"), imageset.MaxServe)
	}
}

// The sets go to the agent once per change: once at the start, not again
// when nothing the node is to do changed, again when a set or a wave did.
func TestSetsSentOncePerChange(t *testing.T) {
	agent := newSetsAgent(t)
	node := labelledNode()
	client := fake.NewClientset(node)
	dyn := newDynamic(t, setObj("release", 1, nil, imgA),
		nodeImagesObj(t, nodeName, state("release", true, map[string]report.SetPhase{imgA: report.SetWaiting})))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := newSetsWatcher(client, runCaches(t, client, dyn), Config{Agent: agent.srv.URL, Node: nodeName, Interval: 50 * time.Millisecond}, discard(), http.DefaultClient)
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx) }()
	defer func() { cancel(); <-done }()

	first, n := agent.waitPut(t, 0, "at the start", func(s report.StageSets) bool { return len(s.Sets) == 1 })
	if s := first.Sets[0]; s.Name != "release" || !s.Selected || s.MayPull != nil {
		t.Fatalf("first: %+v; want release selected, nothing to pull (no holder)", s)
	}

	// Another node appears, waiting too: nothing changes for this one.
	res := dyn.Resource(nodeImagesGVR)
	if _, err := res.Create(ctx, nodeImagesObj(t, "other", state("release", true, map[string]report.SetPhase{imgA: report.SetWaiting})), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * setsDebounce)
	if got := len(agent.bodies()); got != n {
		t.Fatalf("%d PUTs after a change that changes nothing here, want %d: %+v", got, n, agent.bodies())
	}

	// The other node holds the image (the other's rank decides who pulls
	// first, but with one waiter, it is this node).
	if _, err := res.Update(ctx, nodeImagesObj(t, "other", state("release", true, map[string]report.SetPhase{imgA: report.SetHeld})), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, n = agent.waitPut(t, n, "with a holder", func(s report.StageSets) bool {
		return len(s.Sets) == 1 && slices.Equal(s.Sets[0].MayPull, []string{imgA})
	})

	// The set changes: sent again, with its generation.
	if _, err := dyn.Resource(imageSetsGVR).Update(ctx, setObj("release", 2, nil, imgA, "docker.io/library/b:1"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	agent.waitPut(t, n, "of the set changed", func(s report.StageSets) bool {
		return len(s.Sets) == 1 && s.Sets[0].Generation == 2 && len(s.Sets[0].Images) == 2
	})
}

// A restarted agent (a report without sets) gets the sets again, and what
// it says of them goes into the node's NodeImages.
func TestSetsResentAfterAgentRestart(t *testing.T) {
	agent := newSetsAgent(t)
	agent.sets = []report.SetState{state("release", true, map[string]report.SetPhase{imgA: report.SetPulling})}
	client := fake.NewClientset(labelledNode())
	dyn := newDynamic(t, setObj("release", 1, nil, imgA))
	var ap applies
	r := New(client, Config{Agent: agent.srv.URL, Node: nodeName, Interval: 50 * time.Millisecond, Debounce: 10 * time.Millisecond,
		Required: true, ImageSets: true, Dynamic: dyn, Apply: ap.apply})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	agent.waitPut(t, 0, "at the start", func(s report.StageSets) bool { return len(s.Sets) == 1 })
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && (ap.count() == 0 || len(ap.last(t).Sets) == 0) {
		time.Sleep(10 * time.Millisecond)
	}
	if obj := ap.last(t); len(obj.Sets) != 1 || obj.Sets[0].Name != "release" || obj.Sets[0].Images[0].Phase != report.SetPulling {
		t.Fatalf("NodeImages sets: %+v", obj.Sets)
	}
	n := len(agent.bodies())
	time.Sleep(4 * setsDebounce)
	if got := len(agent.bodies()); got != n {
		t.Fatalf("%d PUTs while the agent keeps the sets, want %d", got, n)
	}
	agent.restart()
	again, _ := agent.waitPut(t, n, "after the agent restarted", func(s report.StageSets) bool { return len(s.Sets) == 1 })
	if again.Sets[0].Name != "release" {
		t.Errorf("resent: %+v", again)
	}
}

func TestBusy(t *testing.T) {
	for _, c := range []struct {
		sets []report.SetState
		want bool
	}{
		{nil, false},
		{[]report.SetState{state("s", true, map[string]report.SetPhase{imgA: report.SetHeld})}, false},
		{[]report.SetState{state("s", true, map[string]report.SetPhase{imgA: report.SetFailed})}, false},
		{[]report.SetState{state("s", true, map[string]report.SetPhase{imgA: report.SetPulling})}, true},
		{[]report.SetState{state("s", true, map[string]report.SetPhase{imgA: report.SetWaiting})}, true},
		{[]report.SetState{state("s", false, map[string]report.SetPhase{imgA: report.SetWaiting})}, false},
	} {
		if got := busy(c.sets); got != c.want {
			t.Errorf("busy(%+v) = %v, want %v", c.sets, got, c.want)
		}
	}
}

// An update of an ImageSet's status alone is nothing to the waves; one of
// its spec (a new generation) is.
func TestStatusOnly(t *testing.T) {
	set := func(u *unstructured.Unstructured, status map[string]any) *cachedSet {
		if status != nil {
			u.Object["status"] = status
		}
		s, _ := decodeCachedSet(u)
		return s.(*cachedSet)
	}
	old := set(setObj("release", 1, nil, imgA), nil)
	if n := set(setObj("release", 1, nil, imgA), map[string]any{"missingImages": int64(1)}); !statusOnly(old, n) {
		t.Errorf("a status written: not status only")
	}
	if n := set(setObj("release", 2, nil, imgA, "docker.io/library/b:1"), nil); statusOnly(old, n) {
		t.Errorf("an image added: status only")
	}
	if n := set(setObj("release", 1, map[string]string{"tier": "web"}, imgA), nil); statusOnly(old, n) {
		t.Errorf("a selector changed (same generation): status only")
	}
}

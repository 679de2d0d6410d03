package reporter

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/holdfast-project/holdfast/internal/report"
)

// applies records what the reporter applies, and fails while fail is set.
type applies struct {
	mu     sync.Mutex
	paths  []string
	bodies [][]byte
	fail   error
}

func (a *applies) apply(_ context.Context, path string, body []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail != nil {
		return a.fail
	}
	a.paths, a.bodies = append(a.paths, path), append(a.bodies, slices.Clone(body))
	return nil
}

func (a *applies) last(t *testing.T) report.NodeImages {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	var obj report.NodeImages
	if len(a.bodies) == 0 {
		t.Fatal("nothing applied")
	}
	if err := json.Unmarshal(a.bodies[len(a.bodies)-1], &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

func (a *applies) setFail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fail = err
}

func (a *applies) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.bodies)
}

// TestNodeImages: the reporter writes the node's NodeImages, owned by the
// Node, with what the agent holds and its report cut to size; it writes
// again only when either changes, reads /held only when its hash moves,
// and a failed write is made by a later report.
func TestNodeImages(t *testing.T) {
	ctx := context.Background()
	agent := newRequiredAgent(t)
	held := report.Held{
		{Name: "docker.io/library/a:1", Digest: "sha256:" + hex64("a"), Pinned: true},
		{Name: "docker.io/library/b:1", Digest: "sha256:" + hex64("b")},
	}
	agent.mu.Lock()
	agent.known, agent.held = true, held
	agent.req = report.Required{Counts: map[report.State]int{"missing": 1, "pinned": 1}, HeldHash: held.Hash(),
		NotReady: report.Rows{{Ref: "docker.io/library/c:1", UsedBy: []string{"u1", "u2", "u3", "u4", "u5"}, State: "missing"}}}
	agent.mu.Unlock()
	client := fake.NewClientset(labelledNode())
	var ap applies
	r := New(client, Config{Agent: agent.srv.URL, Node: nodeName, Interval: time.Second, Required: true, Apply: ap.apply})
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }

	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	obj := ap.last(t)
	if ap.paths[0] != "/apis/holdfast.io/v1alpha1/nodeimages/"+nodeName || obj.Kind != "NodeImages" || obj.APIVersion != "holdfast.io/v1alpha1" ||
		obj.Metadata.Name != nodeName {
		t.Fatalf("applied %s: %+v", ap.paths[0], obj)
	}
	if len(obj.Metadata.OwnerReferences) != 1 || obj.Metadata.OwnerReferences[0].UID != "uid-1" || obj.Metadata.OwnerReferences[0].Kind != "Node" {
		t.Errorf("owner: %+v, want the Node (uid-1)", obj.Metadata.OwnerReferences)
	}
	got, err := report.Unpack(obj.Held)
	if err != nil || !slices.Equal(got, held) || obj.Images != 2 || obj.Pinned != 1 || obj.HeldHash != held.Hash() {
		t.Errorf("held: %+v (%v), images %d, pinned %d, hash %s; want %+v", got, err, obj.Images, obj.Pinned, obj.HeldHash, held)
	}
	if obj.Required == nil || len(obj.Required.NotReady) != 1 || len(obj.Required.NotReady[0].UsedBy) != report.MaxUsedBy ||
		obj.Required.Counts["missing"] != 1 || !obj.Updated.Equal(now) {
		t.Errorf("required: %+v, updated %s", obj.Required, obj.Updated)
	}

	// Nothing changed: nothing written, /held not read again.
	now = now.Add(time.Minute)
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if n := ap.count(); n != 1 || agent.heldGets() != 1 {
		t.Fatalf("unchanged: %d applies, %d reads of /held; want 1 and 1", n, agent.heldGets())
	}

	// The node pulls c: /held is read again and the object written.
	held = append(held, report.HeldImage{Name: "docker.io/library/c:1", Digest: "sha256:" + hex64("c"), Pinned: true})
	agent.mu.Lock()
	agent.held = held
	agent.req = report.Required{Ready: true, Counts: map[report.State]int{"pinned": 2}, HeldHash: held.Hash()}
	agent.mu.Unlock()
	ap.setFail(errors.New("the API server is away"))
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if n := ap.count(); n != 1 {
		t.Fatalf("%d applies while applying fails", n)
	}
	ap.setFail(nil)
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	obj = ap.last(t)
	if got, _ := report.Unpack(obj.Held); ap.count() != 2 || len(got) != 3 || obj.Images != 3 || obj.Pinned != 2 || !obj.Required.Ready {
		t.Errorf("after the pull: %d applies, held %+v, %+v", ap.count(), got, obj)
	}
	if n := agent.heldGets(); n != 2 {
		t.Errorf("/held read %d times, want 2 (once per hash)", n)
	}
}

func (a *requiredAgent) heldGets() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.gets
}

func hex64(c string) string {
	out := ""
	for len(out) < 64 {
		out += c
	}
	return out
}

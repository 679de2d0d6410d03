package reporter

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/holdfast-project/holdfast/internal/imageset"
	"github.com/holdfast-project/holdfast/internal/report"
)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// logBuffer is a logger's output, safe to read while it is written.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) has(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Contains(b.buf.String(), s)
}

const (
	leaseName = "holdfast-imagesets"
	leaseNS   = "holdfast"
)

// statusWrites counts the writes of an ImageSet's status.
func statusWrites(dyn interface{ Actions() []clienttesting.Action }) int {
	n := 0
	for _, a := range dyn.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "status" && a.GetResource() == imageSetsGVR {
			n++
		}
	}
	return n
}

// leaderFixture: two Nodes (one web, one db), both with NodeImages saying
// they hold the set's image, and a set of the web nodes.
func leaderFixture(t *testing.T) (*fake.Clientset, *dynamicfake.FakeDynamicClient) {
	web := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{"tier": "web"}}}
	db := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "db-1", Labels: map[string]string{"tier": "db"}}}
	client := fake.NewClientset(web, db)
	held := state("release", true, map[string]report.SetPhase{imgA: report.SetHeld})
	dyn := newDynamic(t, setObj("release", 1, map[string]string{"tier": "web"}, imgA),
		nodeImagesObj(t, "web-1", held), nodeImagesObj(t, "db-1", held))
	return client, dyn
}

func runLeader(t *testing.T, client *fake.Clientset, dyn *dynamicfake.FakeDynamicClient, node string, log *slog.Logger) {
	t.Helper()
	l := &leader{client: client, dyn: dyn, caches: runCaches(t, client, dyn), node: node, log: log, now: time.Now,
		lease: Lease{Name: leaseName, Namespace: leaseNS, Duration: time.Second, Renew: 500 * time.Millisecond, Retry: 50 * time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func waitTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("waited 30 s for %s", what)
}

func setStatus(t *testing.T, dyn *dynamicfake.FakeDynamicClient) imageset.Status {
	t.Helper()
	u, err := dyn.Resource(imageSetsGVR).Get(context.Background(), "release", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set, err := decodeSet(u)
	if err != nil {
		t.Fatal(err)
	}
	return set.Status
}

func staged(st imageset.Status) string {
	for _, c := range st.Conditions {
		if c.Type == imageset.Staged {
			return c.Status
		}
	}
	return ""
}

// The leader writes the set's status once, from the Nodes' real labels (the
// db node, though its agent says it is selected, is not), and not again
// while nothing changes; a change is written.
func TestLeaderWritesStatusOnce(t *testing.T) {
	client, dyn := leaderFixture(t)
	runLeader(t, client, dyn, "web-1", discard())
	waitTrue(t, "a status write", func() bool { return statusWrites(dyn) == 1 })
	st := setStatus(t, dyn)
	if staged(st) != imageset.True || st.Nodes.Selected != 1 || st.Nodes.Staged != 1 {
		t.Fatalf("status %+v; want Staged True, 1 node selected (web-1), 1 staged", st)
	}
	lease, err := client.CoordinationV1().Leases(leaseNS).Get(context.Background(), leaseName, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "web-1" {
		t.Fatalf("lease %+v (%v), want held by web-1", lease, err)
	}

	// A change of a NodeImages that changes no status: nothing written.
	res := dyn.Resource(nodeImagesGVR)
	if _, err := res.Update(context.Background(), nodeImagesObj(t, "db-1"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * setsDebounce)
	if n := statusWrites(dyn); n != 1 {
		t.Fatalf("%d status writes after a change that changes no status, want 1", n)
	}

	// web-1 fails its pull: written.
	failed := report.SetState{Name: "release", Generation: 1, Selected: true,
		Images: []report.SetImage{{Ref: imgA, Phase: report.SetFailed, Error: "no peer has it", Since: time.Now().UTC().Truncate(time.Second)}}}
	if _, err := res.Update(context.Background(), nodeImagesObj(t, "web-1", failed), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTrue(t, "a second status write", func() bool { return statusWrites(dyn) == 2 })
	if st := setStatus(t, dyn); staged(st) != imageset.False || st.Nodes.Failed != 1 || len(st.Failures) != 1 || st.Failures[0].Node != "web-1" {
		t.Errorf("status after the failure: %+v", st)
	}
}

// A reporter that does not hold the Lease writes nothing.
func TestNonLeaderWritesNothing(t *testing.T) {
	client, dyn := leaderFixture(t)
	other, secs := "db-1", int32(3600)
	now := metav1.NewMicroTime(time.Now())
	if _, err := client.CoordinationV1().Leases(leaseNS).Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: leaseName, Namespace: leaseNS},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &other, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runLeader(t, client, dyn, "web-1", discard())
	// It tries the Lease (a get every retry period), and writes nothing.
	waitTrue(t, "tries of the Lease", func() bool {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "leases" {
				n++
			}
		}
		return n >= 5
	})
	time.Sleep(4 * setsDebounce)
	if n := statusWrites(dyn); n != 0 {
		t.Fatalf("%d status writes by a reporter that does not lead", n)
	}
}

// A leader that loses the Lease writes no more.
func TestLosingLeaseStopsWrites(t *testing.T) {
	client, dyn := leaderFixture(t)
	var logs logBuffer
	runLeader(t, client, dyn, "web-1", slog.New(slog.NewTextHandler(&logs, nil)))
	waitTrue(t, "a status write", func() bool { return statusWrites(dyn) == 1 })

	// Another takes the Lease (as one does after this one failed to renew it
	// in time). The fake keeps no resourceVersions: from then on, as the API
	// server would, it refuses the old leader's updates made from its copy.
	var stolen atomic.Bool
	client.PrependReactor("update", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		l, ok := a.(clienttesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if ok && stolen.Load() && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "web-1" {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, leaseName, errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	leases := client.CoordinationV1().Leases(leaseNS)
	lease, err := leases.Get(context.Background(), leaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, secs, now := "db-1", int32(3600), metav1.NewMicroTime(time.Now())
	lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime = &other, &secs, &now
	stolen.Store(true)
	if _, err := leases.Update(context.Background(), lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTrue(t, "the leader to stop leading", func() bool { return logs.has("not leading") })

	// What would change the status: nothing written.
	failed := report.SetState{Name: "release", Generation: 1, Selected: true, Images: []report.SetImage{{Ref: imgA, Phase: report.SetFailed, Error: "x"}}}
	if _, err := dyn.Resource(nodeImagesGVR).Update(context.Background(), nodeImagesObj(t, "web-1", failed), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * setsDebounce)
	if n := statusWrites(dyn); n != 1 {
		t.Fatalf("%d status writes, want 1: the leader that lost the Lease wrote", n)
	}
	if lease, err := leases.Get(context.Background(), leaseName, metav1.GetOptions{}); err != nil || *lease.Spec.HolderIdentity != "db-1" {
		t.Errorf("lease %+v (%v), want still db-1's", lease, err)
	}
}

// A status written is not written again while the cache has not seen it
// yet (the same object, its status as before): a second pass over the
// same cache writes nothing; a status that changed is written.
func TestLeaderWritesOnceBeforeItsCacheSeesIt(t *testing.T) {
	ctx := context.Background()
	_, dyn := leaderFixture(t)
	u, err := dyn.Resource(imageSetsGVR).Get(ctx, "release", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obj, _ := decodeCachedSet(u)
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	if err := store.Add(obj); err != nil {
		t.Fatal(err)
	}
	held := state("release", true, map[string]report.SetPhase{imgA: report.SetHeld})
	nodes := []imageset.Node{{Name: "web-1", Labels: map[string]string{"tier": "web"}, Sets: []report.SetState{held}}}
	l := &leader{dyn: dyn, log: discard(), now: time.Now}
	leads := func() bool { return true }
	for pass := range 2 {
		if !l.writeAll(ctx, store, nodes, leads) {
			t.Fatalf("pass %d: a write failed", pass)
		}
	}
	if n := statusWrites(dyn); n != 1 {
		t.Fatalf("%d status writes from one cache that has not seen the first, want 1", n)
	}
	nodes[0].Sets = []report.SetState{state("release", true, map[string]report.SetPhase{imgA: report.SetFailed})}
	if !l.writeAll(ctx, store, nodes, leads) || statusWrites(dyn) != 2 {
		t.Fatalf("%d status writes after the node failed, want 2", statusWrites(dyn))
	}
	if st := setStatus(t, dyn); st.Nodes.Failed != 1 {
		t.Errorf("status written: %+v", st)
	}
}

package reporter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/holdfast-project/holdfast/internal/journal"
	"github.com/holdfast-project/holdfast/internal/report"
)

const nodeName = "node-1"

// agentStub serves /report from a journal and a summary the test sets.
type agentStub struct {
	mu      sync.Mutex
	j       *journal.Journal
	ready   bool
	pinned  int
	failing []report.Failure
	srv     *httptest.Server
}

func newAgentStub(t *testing.T) *agentStub {
	a := &agentStub{j: journal.New(16, nil), ready: true}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/report" {
			http.NotFound(w, r)
			return
		}
		after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		a.mu.Lock()
		rep := a.j.Report(after, a.ready)
		a.mu.Unlock()
		_ = json.NewEncoder(w).Encode(rep)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *agentStub) set(ready bool, pinned int, failing ...report.Failure) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ready, a.pinned, a.failing = ready, pinned, failing
	a.j.Passed(pinned, 1, failing)
}

// restart gives the agent a new, empty journal, as a new agent process has.
func (a *agentStub) restart() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.j = journal.New(16, nil)
}

func (a *agentStub) record(reason, msg string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.j.Record(journal.Normal, reason, msg)
}

func newNode() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "uid-1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"},
		}},
	}
}

type testClock struct{ t time.Time }

func (c *testClock) now() time.Time { return c.t }

func newTestReporter(t *testing.T, client *fake.Clientset, agent string) (*Reporter, *testClock) {
	t.Helper()
	r := New(client, Config{Agent: agent, Node: nodeName, Interval: 10 * time.Second})
	c := &testClock{t: time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC)}
	r.now = c.now
	return r, c
}

func conditionOf(t *testing.T, client *fake.Clientset) (corev1.NodeCondition, []corev1.NodeCondition) {
	t.Helper()
	node, err := client.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == ConditionType {
			return c, node.Status.Conditions
		}
	}
	t.Fatalf("no %s condition on the node: %+v", ConditionType, node.Status.Conditions)
	return corev1.NodeCondition{}, nil
}

func patches(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "nodes" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

// TestConditionTransitions: the condition follows the report;
// lastTransitionTime moves when the status changes, not when only the
// message does; an unchanged condition is not written again before its
// heartbeat; an unreachable agent is Unknown; the node's other conditions
// are left alone.
func TestConditionTransitions(t *testing.T) {
	ctx := context.Background()
	agent := newAgentStub(t)
	client := fake.NewClientset(newNode())
	r, clock := newTestReporter(t, client, agent.srv.URL)

	step := func(what string, status corev1.ConditionStatus, reason, msg string, transition time.Time) {
		t.Helper()
		if err := r.Once(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		c, all := conditionOf(t, client)
		if c.Status != status || c.Reason != reason || c.Message != msg {
			t.Fatalf("%s: condition %s/%s/%q, want %s/%s/%q", what, c.Status, c.Reason, c.Message, status, reason, msg)
		}
		if !c.LastTransitionTime.Time.Equal(transition) {
			t.Fatalf("%s: lastTransitionTime %v, want %v", what, c.LastTransitionTime, transition)
		}
		ready := 0
		for _, c := range all {
			if c.Type == corev1.NodeReady && c.Reason == "KubeletReady" && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
		if len(all) != 2 || ready != 1 {
			t.Fatalf("%s: the node's other conditions changed: %+v", what, all)
		}
	}

	agent.set(false, 0)
	t0 := clock.t
	step("first pass running", corev1.ConditionFalse, ReasonNotReady, "0 images pinned; the agent's first pass has not finished", t0)

	clock.t = clock.t.Add(5 * time.Second)
	t1 := clock.t
	agent.set(true, 42)
	step("all pinned", corev1.ConditionTrue, ReasonAllPinned, "42 images pinned", t1)

	before := patches(client)
	clock.t = clock.t.Add(10 * time.Second)
	step("unchanged", corev1.ConditionTrue, ReasonAllPinned, "42 images pinned", t1)
	if n := patches(client); n != before {
		t.Fatalf("an unchanged condition was patched again before its heartbeat (%d patches, was %d)", n, before)
	}
	clock.t = clock.t.Add(time.Minute)
	step("heartbeat", corev1.ConditionTrue, ReasonAllPinned, "42 images pinned", t1)
	if c, _ := conditionOf(t, client); patches(client) != before+1 || !c.LastHeartbeatTime.Time.Equal(clock.t) {
		t.Fatalf("heartbeat: %d patches (want %d), lastHeartbeatTime %v (want %v)", patches(client), before+1, c.LastHeartbeatTime, clock.t)
	}

	clock.t = clock.t.Add(10 * time.Second)
	t2 := clock.t
	agent.set(true, 42, report.Failure{Source: "/var/lib/holdfast/images/broken.tar.gz", Error: "unexpected EOF"})
	step("a source failing", corev1.ConditionFalse, ReasonSourcesFailing, "42 images pinned; failing: broken.tar.gz (unexpected EOF)", t2)

	clock.t = clock.t.Add(10 * time.Second)
	agent.set(true, 41, report.Failure{Source: "/var/lib/holdfast/images/broken.tar.gz", Error: "gzip: invalid header"})
	step("failing otherwise", corev1.ConditionFalse, ReasonSourcesFailing, "41 images pinned; failing: broken.tar.gz (gzip: invalid header)", t2)

	clock.t = clock.t.Add(10 * time.Second)
	t3 := clock.t
	agent.set(true, 42)
	step("recovered", corev1.ConditionTrue, ReasonAllPinned, "42 images pinned", t3)

	clock.t = clock.t.Add(10 * time.Second)
	t4 := clock.t
	agent.srv.Close()
	if err := r.Once(ctx); err != nil {
		t.Fatalf("agent unreachable: %v", err)
	}
	c, _ := conditionOf(t, client)
	if c.Status != corev1.ConditionUnknown || c.Reason != ReasonAgentUnreachable || !c.LastTransitionTime.Time.Equal(t4) {
		t.Fatalf("agent unreachable: %+v", c)
	}
}

// TestConditionKeepsTransitionOfEarlierReporter: a reporter that starts
// again takes lastTransitionTime from the node when the status is the same.
func TestConditionKeepsTransitionOfEarlierReporter(t *testing.T) {
	ctx := context.Background()
	agent := newAgentStub(t)
	agent.set(true, 3)
	node := newNode()
	since := metav1.NewTime(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{Type: ConditionType, Status: corev1.ConditionTrue,
		Reason: ReasonAllPinned, Message: "2 images pinned", LastTransitionTime: since, LastHeartbeatTime: since})
	client := fake.NewClientset(node)
	r, _ := newTestReporter(t, client, agent.srv.URL)
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	c, all := conditionOf(t, client)
	if c.Message != "3 images pinned" || !c.LastTransitionTime.Equal(&since) || len(all) != 2 {
		t.Fatalf("condition %+v (all %d), want message 3 images pinned and lastTransitionTime %v", c, len(all), since)
	}
}

func TestConditionMessages(t *testing.T) {
	var failing []report.Failure
	for _, n := range []string{"a.tar", "b.tar", "c.tar", "d.tar", "e.tar"} {
		failing = append(failing, report.Failure{Source: "/images/" + n, Error: "unexpected EOF"})
	}
	c := Condition(&report.Report{Ready: true, Pinned: 7, Failing: failing})
	if want := "7 images pinned; failing: a.tar (unexpected EOF), b.tar (unexpected EOF), c.tar (unexpected EOF) and 2 more"; c.Message != want {
		t.Errorf("message %q, want %q", c.Message, want)
	}
	c = Condition(&report.Report{Ready: true, Pinned: 1, Failing: []report.Failure{{Error: "reading /images: permission denied"}}})
	if want := "1 images pinned; failing: reading /images: permission denied"; c.Message != want {
		t.Errorf("message %q, want %q", c.Message, want)
	}
	c = Condition(&report.Report{Ready: true, Pinned: 2, HealBackoff: []string{"docker.io/library/nginx:1.27"}})
	if c.Status != corev1.ConditionFalse || c.Reason != ReasonHealBackoff || c.Message != "2 images pinned; heal backing off: docker.io/library/nginx:1.27" {
		t.Errorf("heal backoff: %+v", c)
	}
}

func createdEvents(t *testing.T, client *fake.Clientset) []corev1.Event {
	t.Helper()
	l, err := client.CoreV1().Events(EventNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// TestEventsSentOnceEach: each journal event becomes one Event on the Node,
// in order; an API error stops the batch and the next round sends the rest,
// none twice and none lost; the same reason and message again counts on the
// Event already there; an agent that restarted is read from its journal's
// start.
func TestEventsSentOnceEach(t *testing.T) {
	ctx := context.Background()
	agent := newAgentStub(t)
	agent.set(true, 2)
	agent.record(journal.ReasonUnpinned, "unpinned example.com/a:1: no source wants it")
	agent.record(journal.ReasonUnpinned, "unpinned example.com/b:1: no source wants it")
	agent.record(journal.ReasonReleased, "released lease holdfast/x of /images/x.tar: gone")
	client := fake.NewClientset(newNode())
	creates, failOn := 0, 2
	client.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		creates++
		if creates == failOn {
			return true, nil, errors.New("the server is currently unable to handle the request")
		}
		return false, nil, nil
	})
	r, _ := newTestReporter(t, client, agent.srv.URL)

	if err := r.Once(ctx); err == nil {
		t.Fatal("an API error on the second event was not returned")
	}
	if evs := createdEvents(t, client); len(evs) != 1 {
		t.Fatalf("%d Events after the failed round, want 1", len(evs))
	}
	if err := r.Once(ctx); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	evs := createdEvents(t, client)
	seen := map[string]int{}
	for _, e := range evs {
		seen[e.Reason+" "+e.Message]++
		if e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != nodeName || e.InvolvedObject.UID != "uid-1" ||
			e.Source.Component != Component || e.Namespace != "default" || e.Count != 1 {
			t.Errorf("event %+v", e)
		}
	}
	// SourceFailed is not among them: set recorded no failure.
	if len(evs) != 3 || len(seen) != 3 {
		t.Fatalf("%d Events (%d distinct) after the retry, want 3: %v", len(evs), len(seen), seen)
	}

	agent.record(journal.ReasonUnpinned, "unpinned example.com/a:1: no source wants it")
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	evs = createdEvents(t, client)
	if len(evs) != 3 {
		t.Fatalf("a repeated event made a new Event: %d", len(evs))
	}
	counted := false
	for _, e := range evs {
		if e.Message == "unpinned example.com/a:1: no source wants it" {
			counted = e.Count == 2
		}
	}
	if !counted {
		t.Fatalf("the repeated event was not counted on its Event: %+v", evs)
	}

	agent.restart()
	agent.record(journal.ReasonReleased, "released lease holdfast/y of /images/y.tar: gone")
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if evs := createdEvents(t, client); len(evs) != 4 {
		t.Fatalf("the first event of a restarted agent was not sent: %d Events", len(evs))
	}
}

// TestEventsBounded: a report sends at most eventsPerRound Events, the
// condition patched first; the next report, which Run makes at once, sends
// the rest.
func TestEventsBounded(t *testing.T) {
	ctx := context.Background()
	agent := newAgentStub(t)
	agent.mu.Lock()
	agent.j = journal.New(2*eventsPerRound, nil) // room for them all
	agent.mu.Unlock()
	agent.set(true, 2)
	for i := range eventsPerRound + 5 {
		agent.record(journal.ReasonUnpinned, fmt.Sprintf("unpinned example.com/app-%d:1: no source wants it", i))
	}
	client := fake.NewClientset(newNode())
	r, _ := newTestReporter(t, client, agent.srv.URL)
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if evs := createdEvents(t, client); len(evs) != eventsPerRound || !r.behind {
		t.Fatalf("%d Events after one report (behind %v), want %d", len(evs), r.behind, eventsPerRound)
	}
	if c, _ := conditionOf(t, client); c.Status != corev1.ConditionTrue {
		t.Errorf("condition %+v before the Events", c)
	}
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if evs := createdEvents(t, client); len(evs) != eventsPerRound+5 || r.behind {
		t.Fatalf("%d Events after two reports (behind %v), want %d", len(evs), r.behind, eventsPerRound+5)
	}
}

// TestRunStopsOnCancel: Run returns nil once its context ends, also while it
// backs off from an API server that does not answer.
func TestRunStopsOnCancel(t *testing.T) {
	agent := newAgentStub(t)
	agent.set(true, 1)
	client := fake.NewClientset() // no node: every round fails
	r, _ := newTestReporter(t, client, agent.srv.URL)
	r.now = time.Now
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for len(client.Actions()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if len(client.Actions()) == 0 {
		t.Fatal("Run made no API call")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

func TestTruncate(t *testing.T) {
	long := strings.Repeat("é", 1000) // 2000 bytes
	got := truncate(long)
	if len(got) > maxMessage || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
		t.Fatalf("truncated to %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	if s := "42 images pinned"; truncate(s) != s {
		t.Fatalf("a short message changed: %q", truncate(s))
	}
}

// TestEventsNotSentAgainAfterRestart: a reporter that starts again beside the
// same agent sends none of the journal events already on the Node (not even
// one that was counted on an earlier Event), sends the new ones, and counts a
// repeated one on the Event already there.
func TestEventsNotSentAgainAfterRestart(t *testing.T) {
	ctx := context.Background()
	agent := newAgentStub(t)
	agent.set(true, 2)
	agent.record(journal.ReasonUnpinned, "unpinned example.com/a:1: no source wants it")
	agent.record(journal.ReasonReleased, "released lease holdfast/x of /images/x.tar: gone")
	agent.record(journal.ReasonUnpinned, "unpinned example.com/a:1: no source wants it")
	client := fake.NewClientset(newNode())
	first, _ := newTestReporter(t, client, agent.srv.URL)
	if err := first.Once(ctx); err != nil {
		t.Fatal(err)
	}
	counts := func() map[string]int32 {
		m := map[string]int32{}
		for _, e := range createdEvents(t, client) {
			m[e.Message] += e.Count
		}
		return m
	}
	before := counts()
	if len(before) != 2 || before["unpinned example.com/a:1: no source wants it"] != 2 {
		t.Fatalf("before the restart: %v, want two Events, the repeated one counted twice", before)
	}

	creates := 0
	client.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		creates++
		return false, nil, nil
	})
	second, _ := newTestReporter(t, client, agent.srv.URL)
	if err := second.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if creates != 0 {
		t.Errorf("the reporter that started again sent %d journal events again", creates)
	}
	if after := counts(); len(createdEvents(t, client)) != 2 || after["unpinned example.com/a:1: no source wants it"] != 2 ||
		after["released lease holdfast/x of /images/x.tar: gone"] != 1 {
		t.Fatalf("after the reporter started again: %d Events, %v; want the same two, counted as before", len(createdEvents(t, client)), after)
	}

	agent.record(journal.ReasonReleased, "released lease holdfast/y of /images/y.tar: gone")
	agent.record(journal.ReasonUnpinned, "unpinned example.com/a:1: no source wants it")
	if err := second.Once(ctx); err != nil {
		t.Fatal(err)
	}
	after := counts()
	if len(createdEvents(t, client)) != 3 || after["released lease holdfast/y of /images/y.tar: gone"] != 1 ||
		after["unpinned example.com/a:1: no source wants it"] != 3 {
		t.Fatalf("new events after the restart: %d Events, %v; want one new Event and the repeat counted (3)", len(createdEvents(t, client)), after)
	}

	// Two hours on, the Events have expired from the API: a reporter that
	// starts then does not bring the journal's old events back.
	for _, e := range createdEvents(t, client) {
		if err := client.CoreV1().Events(EventNamespace).Delete(ctx, e.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	creates = 0
	third, clock := newTestReporter(t, client, agent.srv.URL)
	clock.t = time.Now().Add(2 * time.Hour)
	if err := third.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if creates != 0 {
		t.Errorf("a reporter started after the Events expired sent %d journal events of hours ago", creates)
	}
}

// TestAgentRestartSeenWithLongerJournal: an agent that started again and has
// already recorded more events than the reporter's cursor counts is still seen
// as a new journal: its first events are sent, none skipped.
func TestAgentRestartSeenWithLongerJournal(t *testing.T) {
	ctx := context.Background()
	agent := newAgentStub(t)
	agent.set(true, 1)
	agent.record(journal.ReasonUnpinned, "unpinned example.com/a:1: no source wants it")
	client := fake.NewClientset(newNode())
	r, _ := newTestReporter(t, client, agent.srv.URL)
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	n := len(createdEvents(t, client))
	agent.restart()
	for i := range 4 {
		agent.record(journal.ReasonReleased, fmt.Sprintf("released lease holdfast/%d of /images/%d.tar: gone", i, i))
	}
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(createdEvents(t, client)) - n; got != 4 {
		t.Fatalf("%d Events for the restarted agent's 4 events", got)
	}
}

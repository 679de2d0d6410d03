package reporter

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/holdfast-project/holdfast/internal/report"
)

// requiredAgent stands in for the agent: it records the sets PUT to
// /required and serves a /report whose required part the test sets; the
// part is Known once a set came, until forget.
type requiredAgent struct {
	mu      sync.Mutex
	puts    []report.RequiredSet
	refuse  int // PUTs to answer 503, and not take
	known   bool
	req     report.Required
	held    report.Held // served at /held
	gets    int         // of /held
	started time.Time
	srv     *httptest.Server
}

func newRequiredAgent(t *testing.T) *requiredAgent {
	a := &requiredAgent{started: time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC), req: report.Required{Ready: true, Counts: map[report.State]int{}}}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		switch {
		case r.URL.Path == "/required" && r.Method == http.MethodPut:
			var set report.RequiredSet
			if err := json.NewDecoder(r.Body).Decode(&set); err != nil || r.Header.Get("Content-Type") != "application/json" {
				http.Error(w, "bad set", http.StatusBadRequest)
				return
			}
			if a.refuse > 0 {
				a.refuse--
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return
			}
			a.puts = append(a.puts, set)
			a.known = true
			w.WriteHeader(http.StatusNoContent)
		case r.URL.Path == "/held":
			a.gets++
			_, _ = w.Write(a.held.Text())
		case r.URL.Path == "/report":
			req := a.req
			req.Known = a.known
			_ = json.NewEncoder(w).Encode(report.Report{Ready: true, Next: 1, Started: a.started, Required: &req})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *requiredAgent) forget() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.known = false
}

func (a *requiredAgent) sets() []report.RequiredSet {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.puts)
}

// waitPut waits, on a generous deadline, for a PUT after the first after
// ones that ok accepts, and returns it.
func (a *requiredAgent) waitPut(t *testing.T, after int, what string, ok func(report.RequiredSet) bool) (report.RequiredSet, int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		puts := a.sets()
		for i := after; i < len(puts); i++ {
			if ok(puts[i]) {
				return puts[i], i + 1
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no PUT /required %s; the agent got %+v", what, a.sets())
	return report.RequiredSet{}, 0
}

func labelledNode() *corev1.Node {
	n := newNode()
	n.Labels = map[string]string{"kubernetes.io/hostname": nodeName, "kubernetes.io/os": "linux"}
	return n
}

// runRequired runs a reporter with Required and ClusterWorkloads until the
// test ends.
func runRequired(t *testing.T, client *fake.Clientset, agent string) *Reporter {
	t.Helper()
	r := New(client, Config{Agent: agent, Node: nodeName, Interval: 50 * time.Millisecond, Debounce: 10 * time.Millisecond,
		Required: true, ClusterWorkloads: true})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
	return r
}

func refsOf(set report.RequiredSet) []string {
	var refs []string
	for _, img := range set.Images {
		refs = append(refs, img.Ref)
	}
	return refs
}

// TestRequiredReachesAgent: a Deployment's images reach the agent, with who
// uses them; one whose nodeSelector names another node's hostname does not,
// one whose node affinity asks for kubernetes.io/os In [linux] does.
func TestRequiredReachesAgent(t *testing.T) {
	agent := newRequiredAgent(t)
	elsewhere := deployment("shop", "elsewhere", podSpec("redis:7"))
	elsewhere.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "node-2"}
	linux := deployment("shop", "db", withAffinity(term(req("kubernetes.io/os", corev1.NodeSelectorOpIn, "linux"))))
	linux.Spec.Template.Spec.Containers = []corev1.Container{{Name: "db", Image: "postgres:17"}}
	web := deployment("shop", "web", corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}}})
	client := fake.NewClientset(labelledNode(), web, elsewhere, linux)
	runRequired(t, client, agent.srv.URL)

	set, _ := agent.waitPut(t, 0, "naming nginx", func(s report.RequiredSet) bool { return slices.Contains(refsOf(s), "docker.io/library/nginx:1.27") })
	want := []report.RequiredImage{
		{Ref: "docker.io/library/nginx:1.27", UsedBy: []string{"Deployment shop/web containers/web"}},
		{Ref: "docker.io/library/postgres:17", UsedBy: []string{"Deployment shop/db containers/db"}},
	}
	got, _ := json.Marshal(set.Images)
	wantJSON, _ := json.Marshal(want)
	if string(got) != string(wantJSON) {
		t.Fatalf("the agent got %s, want %s (redis only runs on node-2)", got, wantJSON)
	}
}

// TestRequiredRetried: a set the agent refuses is sent again later.
func TestRequiredRetried(t *testing.T) {
	agent := newRequiredAgent(t)
	agent.refuse = 2
	client := fake.NewClientset(labelledNode(), deployment("shop", "web", podSpec("nginx:1.27")))
	runRequired(t, client, agent.srv.URL)
	agent.waitPut(t, 0, "after two refusals", func(s report.RequiredSet) bool { return slices.Contains(refsOf(s), "docker.io/library/nginx:1.27") })
	agent.mu.Lock()
	defer agent.mu.Unlock()
	if agent.refuse != 0 {
		t.Fatalf("%d refusals left", agent.refuse)
	}
}

// TestRequiredWatches: a Deployment added after the first set was sent
// reaches the agent in a new PUT, by a watch: the Deployments are listed
// once.
func TestRequiredWatches(t *testing.T) {
	agent := newRequiredAgent(t)
	client := fake.NewClientset(labelledNode(), deployment("shop", "web", podSpec("nginx:1.27")))
	runRequired(t, client, agent.srv.URL)
	_, n := agent.waitPut(t, 0, "naming nginx", func(s report.RequiredSet) bool { return slices.Contains(refsOf(s), "docker.io/library/nginx:1.27") })

	if _, err := client.AppsV1().Deployments("shop").Create(context.Background(), deployment("shop", "cache", podSpec("redis:7")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	set, _ := agent.waitPut(t, n, "naming the new Deployment's redis", func(s report.RequiredSet) bool {
		return slices.Contains(refsOf(s), "docker.io/library/redis:7")
	})
	if !slices.Contains(refsOf(set), "docker.io/library/nginx:1.27") {
		t.Errorf("the new set lost nginx: %v", refsOf(set))
	}
	lists, watches := 0, 0
	for _, a := range client.Actions() {
		if a.GetResource().Resource == "deployments" {
			switch a.GetVerb() {
			case "list":
				lists++
			case "watch":
				watches++
			}
		}
	}
	if lists != 1 || watches != 1 {
		t.Errorf("the Deployments were listed %d times and watched %d times, want once each", lists, watches)
	}
}

// TestRequiredResentWhenAgentHasNone: an agent whose report says it has no
// set (it started again) gets the set again, unchanged.
func TestRequiredResentWhenAgentHasNone(t *testing.T) {
	agent := newRequiredAgent(t)
	client := fake.NewClientset(labelledNode(), deployment("shop", "web", podSpec("nginx:1.27")))
	runRequired(t, client, agent.srv.URL)
	first, n := agent.waitPut(t, 0, "naming nginx", func(s report.RequiredSet) bool { return len(s.Images) == 1 })
	// A report read since says the agent has the set.
	deadline := time.Now().Add(30 * time.Second)
	for conditionsOf(t, client)[ImagesConditionType].Status != corev1.ConditionTrue {
		if time.Now().After(deadline) {
			t.Fatalf("HoldfastImagesReady never True: %+v", conditionsOf(t, client))
		}
		time.Sleep(10 * time.Millisecond)
	}
	agent.forget()
	again, _ := agent.waitPut(t, n, "after the agent forgot the set", func(report.RequiredSet) bool { return true })
	if !slices.Equal(refsOf(again), refsOf(first)) {
		t.Fatalf("sent again %v, want %v", refsOf(again), refsOf(first))
	}
}

// TestOnceAsksResend: a report without a known set asks the watcher to
// send again; one with a known set does not.
func TestOnceAsksResend(t *testing.T) {
	agent := newRequiredAgent(t)
	client := fake.NewClientset(labelledNode())
	r := New(client, Config{Agent: agent.srv.URL, Node: nodeName, Required: true})
	if err := r.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(r.req.resend) != 1 {
		t.Fatal("a report with no known set did not ask for the set again")
	}
	<-r.req.resend
	agent.mu.Lock()
	agent.known = true
	agent.mu.Unlock()
	if err := r.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(r.req.resend) != 0 {
		t.Fatal("a report with a known set asked for the set again")
	}
}

func conditionsOf(t *testing.T, client *fake.Clientset) map[corev1.NodeConditionType]corev1.NodeCondition {
	t.Helper()
	node, err := client.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := map[corev1.NodeConditionType]corev1.NodeCondition{}
	for _, c := range node.Status.Conditions {
		if c.Type == ConditionType || c.Type == ImagesConditionType {
			m[c.Type] = c
		}
	}
	return m
}

func verdict(ref string, state report.State, usedBy ...string) report.Image {
	return report.Image{Ref: ref, UsedBy: usedBy, State: state}
}

// TestImagesCondition: HoldfastImagesReady on the Node follows the report's
// required part, in one patch with HoldfastPinned; Unknown while the agent
// has no set or cannot be read.
func TestImagesCondition(t *testing.T) {
	ctx := context.Background()
	agent := newRequiredAgent(t)
	client := fake.NewClientset(newNode())
	r, clock := newTestReporter(t, client, agent.srv.URL)
	r.cfg.Required = true
	r.req = newRequiredWatcher(client, r.cfg, r.log, r.http)

	var many report.Rows
	for _, ref := range []string{"a:1", "b:1", "c:1", "d:1", "e:1", "f:1"} {
		many = append(many, verdict("docker.io/library/"+ref, "present", "Deployment x/"+ref[:1]))
	}
	for _, tc := range []struct {
		name   string
		known  bool
		req    report.Required
		status corev1.ConditionStatus
		reason string
		msg    string
	}{
		{"no set", false, report.Required{}, corev1.ConditionUnknown, ReasonNoRequiredSet, "the agent has no set of required images yet"},
		{"all pinned", true, report.Required{Ready: true, Counts: map[report.State]int{"pinned": 3}}, corev1.ConditionTrue, ReasonAllPinned, "3 required images pinned"},
		{"missing", true, report.Required{Counts: map[report.State]int{"pinned": 2, "present": 1, "missing": 1}, NotReady: report.Rows{
			verdict("docker.io/library/a:1", "present", "Pod x/a-1 containers/a"),
			verdict("docker.io/library/x:1", "missing", "Deployment a/b containers/x", "Pod a/b-1 containers/x"),
		}}, corev1.ConditionFalse, ReasonImagesMissing,
			"docker.io/library/x:1 missing (Deployment a/b), docker.io/library/a:1 present (Pod x/a-1); 2 pinned, 1 present, 1 missing"},
		{"mismatch", true, report.Required{Counts: map[report.State]int{"mismatch": 1}, NotReady: report.Rows{verdict("docker.io/library/m@sha256:"+strings.Repeat("0", 64), "mismatch")}},
			corev1.ConditionFalse, ReasonImagesMissing, "docker.io/library/m@sha256:" + strings.Repeat("0", 64) + " mismatch; 1 mismatch"},
		{"unpinned", true, report.Required{Counts: map[report.State]int{"pinned": 1, "present": 6}, NotReady: many}, corev1.ConditionFalse, ReasonImagesUnpinned,
			"docker.io/library/a:1 present (Deployment x/a), docker.io/library/b:1 present (Deployment x/b), docker.io/library/c:1 present (Deployment x/c), " +
				"docker.io/library/d:1 present (Deployment x/d), docker.io/library/e:1 present (Deployment x/e) and 1 more; 1 pinned, 6 present"},
		{"pulled from peers", true, report.Required{Counts: map[report.State]int{"pinned": 1, "missing": 2}, Pulling: 2, NotReady: report.Rows{
			{Ref: "docker.io/library/p:1", State: "missing", Pulling: true},
			{Ref: "docker.io/library/q:1", State: "missing", Pulling: true, PullError: "not found"},
			{Ref: "docker.io/library/r:1", State: "missing", Pulling: true, PullError: "refused by the signature policy: unsigned"},
		}}, corev1.ConditionFalse, ReasonImagesMissing,
			"docker.io/library/p:1 missing: being pulled from peers, docker.io/library/q:1 missing: its pull from peers failed, " +
				"docker.io/library/r:1 missing: refused by the signature policy; 1 pinned, 2 missing, 2 being pulled from peers"},
	} {
		agent.mu.Lock()
		agent.known, agent.req = tc.known, tc.req
		agent.mu.Unlock()
		clock.t = clock.t.Add(10 * time.Second)
		before := patches(client)
		if err := r.Once(ctx); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		c := conditionsOf(t, client)
		got := c[ImagesConditionType]
		if got.Status != tc.status || got.Reason != tc.reason || got.Message != tc.msg {
			t.Errorf("%s: %s/%s/%q, want %s/%s/%q", tc.name, got.Status, got.Reason, got.Message, tc.status, tc.reason, tc.msg)
		}
		if p := c[ConditionType]; p.Status != corev1.ConditionTrue || p.Reason != ReasonAllPinned {
			t.Errorf("%s: HoldfastPinned %+v", tc.name, p)
		}
		if n := patches(client) - before; n != 1 {
			t.Errorf("%s: %d patches of the Node's status, want 1", tc.name, n)
		}
	}

	agent.srv.Close()
	clock.t = clock.t.Add(10 * time.Second)
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if c := conditionsOf(t, client)[ImagesConditionType]; c.Status != corev1.ConditionUnknown || c.Reason != ReasonNoRequiredSet ||
		!strings.HasPrefix(c.Message, "reading the agent's report") || !c.LastTransitionTime.Time.Equal(clock.t) {
		t.Errorf("agent unreachable: %+v", c)
	}
}

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/holdfast-project/holdfast/internal/imageset"
	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// setAgent stands in for a node's agent behind its reporter: it takes PUT /sets with the token, holds the
// images the test gives it, and pulls an image the reporter lets it (MayPull): Pulling in one report, Held
// in the next.
type setAgent struct {
	mu       sync.Mutex
	token    string
	held     map[string]bool
	pulling  map[string]bool
	sets     *report.StageSets
	admitted map[string]time.Time // when an image first came in MayPull
	srv      *httptest.Server
}

var setsHeld = report.Held{{Name: "docker.io/library/base:1", Digest: "sha256:" + strings.Repeat("b", 64), Pinned: true}}

func newSetAgent(t *testing.T, token string) *setAgent {
	a := &setAgent{token: token, held: map[string]bool{}, pulling: map[string]bool{}, admitted: map[string]time.Time{}}
	started := time.Now().UTC()
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if r.Method == http.MethodPut && r.Header.Get("Authorization") != "Bearer "+a.token {
			http.Error(w, "not the node's reporter", http.StatusUnauthorized)
			return
		}
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/required":
			w.WriteHeader(http.StatusNoContent)
		case r.Method == http.MethodPut && r.URL.Path == "/sets":
			var s report.StageSets
			if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			a.sets = &s
			for _, set := range s.Sets {
				for _, img := range set.MayPull {
					if _, ok := a.admitted[img]; !ok && set.Selected && !a.held[img] {
						a.admitted[img] = time.Now()
						a.pulling[img] = true
					}
				}
			}
			w.WriteHeader(http.StatusNoContent)
		case r.URL.Path == "/held":
			_, _ = w.Write(setsHeld.Text())
		case r.URL.Path == "/report":
			_ = json.NewEncoder(w).Encode(report.Report{Ready: true, Next: 1, Started: started,
				Required: &report.Required{Known: true, Ready: true, Counts: map[report.State]int{}, HeldHash: setsHeld.Hash()}, Sets: a.states()})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// states is what the agent says of the sets; a pull reported once is done by the next report.
func (a *setAgent) states() []report.SetState {
	if a.sets == nil {
		return nil
	}
	out := []report.SetState{}
	var done []string
	for _, s := range a.sets.Sets {
		st := report.SetState{Name: s.Name, Generation: s.Generation, Selected: s.Selected}
		for _, img := range slices.Sorted(slices.Values(s.Images)) {
			phase := report.SetWaiting
			switch {
			case a.held[img]:
				phase = report.SetHeld
			case a.pulling[img] && s.Selected:
				phase = report.SetPulling
				done = append(done, img)
			}
			if s.Selected || phase == report.SetHeld {
				st.Images = append(st.Images, report.SetImage{Ref: img, Phase: phase})
			}
		}
		out = append(out, st)
	}
	for _, img := range done {
		a.held[img], a.pulling[img] = true, false
	}
	return out
}

func (a *setAgent) hold(img string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held[img] = true
}

func (a *setAgent) admittedAt(img string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.admitted[img]
	return at, ok
}

// TestImageSetStaged: two reporters (processes, the cluster's API server) behind stand-in agents, the chart's
// CustomResourceDefinitions applied. One reporter leads. An ImageSet of an image no node holds is Progressing
// with the image missing on both; once node 1 holds it, node 2 is let pull it (the wave), and `kubectl wait
// --for=condition=Staged` returns; `kubectl get imagesets` prints the chart's columns.
func TestImageSetStaged(t *testing.T) {
	c := needCluster(t)
	kubectl := filepath.Join(c.k8sBin, "kubectl")
	reporterBin := filepath.Join(c.repoBin, "holdfast-reporter")
	for _, b := range []string{kubectl, reporterBin} {
		if !executable(b) {
			testenv.Missing(t, "cluster", b+" (make deps, make build)")
		}
	}
	helmBin := findHelm(t, c.repoBin)
	ctx := context.Background()
	kc := func(args ...string) (string, error) {
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", c.admin}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// The chart's CustomResourceDefinitions, as helm renders them.
	crds, err := exec.Command(helmBin, "template", "hf", filepath.Join(repoRoot(), "deploy", "helm", "holdfast"),
		"--show-only", "templates/crd.yaml").Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	crdFile := filepath.Join(t.TempDir(), "crds.yaml")
	if err := os.WriteFile(crdFile, crds, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := kc("apply", "-f", crdFile); err != nil {
		t.Fatalf("kubectl apply the CustomResourceDefinitions: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := kc("delete", "--wait=true", "-f", crdFile); err != nil {
			t.Errorf("kubectl delete the CustomResourceDefinitions: %v\n%s", err, out)
		}
	})
	if out, err := kc("wait", "--for=condition=Established", "--timeout=30s", "crd/imagesets.holdfast.io", "crd/nodeimages.holdfast.io"); err != nil {
		t.Fatalf("kubectl wait for the CustomResourceDefinitions: %v\n%s", err, out)
	}

	// Two nodes of the set's label (Node objects: no kubelet stands behind them), a namespace for the Lease.
	const ns, lease, label = "holdfast-sets", "hf-holdfast-imagesets", "holdfast.io/imageset-test"
	nodes := []string{"hf-sets-1", "hf-sets-2"}
	for _, n := range nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{label: "yes"}}}
		if _, err := c.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.client.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}) })
	}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })

	// A stand-in agent and a reporter per node; the reporters read /report every 10 s unless a set's pull runs
	// or waits.
	agents := make([]*setAgent, len(nodes))
	for i, n := range nodes {
		token := fmt.Sprintf("token-%d", i)
		agents[i] = newSetAgent(t, token)
		tokenFile := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := startProc("reporter-"+n, c.logPath("reporter-"+n), c.env(), reporterBin, "--node", n, "--agent", agents[i].srv.URL,
			"--kubeconfig", c.admin, "--token-file", tokenFile, "--interval", "10s", "--cluster-workloads=false",
			"--imagesets", "--leader-elect", "--lease-name", lease, "--lease-namespace", ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := p.stop(10 * time.Second); err != nil {
				t.Errorf("stopping the reporter of %s: %v", n, err)
			}
			if t.Failed() {
				t.Logf("reporter of %s:\n%s", n, p.tail(40))
			}
		})
	}
	start := time.Now()
	var holder string
	if err := waitFor("a reporter to hold the Lease", 30*time.Second, func() (bool, error) {
		l, err := c.client.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		holder = *l.Spec.HolderIdentity
		return slices.Contains(nodes, holder), nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s leads, %.1fs after the reporters started", holder, time.Since(start).Seconds())

	// An ImageSet of an image no node holds yet.
	img := "registry.example.com/shop/web:2.0.0"
	dyn, err := dynamic.NewForConfig(c.restConfig)
	if err != nil {
		t.Fatal(err)
	}
	sets := dyn.Resource(schema.GroupVersionResource{Group: report.Group, Version: report.Version, Resource: imageset.Resource})
	set := &unstructured.Unstructured{Object: map[string]any{"apiVersion": report.APIVersion, "kind": imageset.Kind,
		"metadata": map[string]any{"name": "x"},
		"spec":     map[string]any{"images": []any{img}, "nodeSelector": map[string]any{label: "yes"}}}}
	if _, err := sets.Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sets.Delete(ctx, "x", metav1.DeleteOptions{}) })
	status := func() imageset.Status {
		u, err := sets.Get(ctx, "x", metav1.GetOptions{})
		var s imageset.ImageSet
		if err == nil {
			data, _ := json.Marshal(u.Object)
			_ = json.Unmarshal(data, &s)
		}
		return s.Status
	}
	cond := func(st imageset.Status, typ string) imageset.Condition {
		for _, c := range st.Conditions {
			if c.Type == typ {
				return c
			}
		}
		return imageset.Condition{}
	}
	if err := waitFor("the set Progressing, its image missing on both nodes", 30*time.Second, func() (bool, error) {
		st := status()
		return cond(st, imageset.Progressing).Status == imageset.True && cond(st, imageset.Staged).Status == imageset.False &&
			st.Nodes.Selected == 2 && st.MissingImages == 1 && len(st.Missing) == 1 && st.Missing[0].Nodes == 2, nil
	}); err != nil {
		t.Fatalf("%v; status %+v", err, status())
	}
	t.Logf("status while missing everywhere: %+v", cond(status(), imageset.Progressing))
	if _, ok := agents[1].admittedAt(img); ok {
		t.Fatalf("node 2 was let pull %s while no node held it", img)
	}

	// Node 1 gets the image (as from an archive): node 2 is let pull it from there, and the set is Staged.
	held := time.Now()
	agents[0].hold(img)
	if out, err := kc("wait", "--for=condition=Staged", "--timeout=60s", "imageset/x"); err != nil {
		t.Fatalf("kubectl wait --for=condition=Staged: %v\n%s; status %+v", err, out, status())
	}
	staged := time.Since(held)
	admitted, ok := agents[1].admittedAt(img)
	if !ok {
		t.Fatalf("the set Staged but node 2 was never let pull %s", img)
	}
	if _, ok := agents[0].admittedAt(img); ok {
		t.Errorf("node 1, which holds %s, was let pull it", img)
	}
	t.Logf("wave overhead (node 1 holds the image → node 2 let pull it): %.2fs; node 1 holds → kubectl wait returns: %.2fs",
		admitted.Sub(held).Seconds(), staged.Seconds())
	if st := status(); st.Nodes.Selected != 2 || st.Nodes.Staged != 2 || st.MissingImages != 0 {
		t.Errorf("status after kubectl wait: %+v", st)
	}

	out, err := kc("get", "imagesets")
	if err != nil {
		t.Fatalf("kubectl get imagesets: %v\n%s", err, out)
	}
	t.Logf("kubectl get imagesets:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var row []string
	if len(lines) == 2 {
		row = strings.Fields(lines[1])
	}
	if len(lines) != 2 || !slices.Equal(strings.Fields(lines[0]), []string{"NAME", "STAGED", "NODES", "STAGED-NODES", "FAILED", "MISSING", "AGE"}) ||
		len(row) != 7 || !slices.Equal(row[:6], []string{"x", "True", "2", "2", "0", "0"}) {
		t.Errorf("kubectl get imagesets printed:\n%s", out)
	}
}

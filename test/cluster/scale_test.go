package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/holdfast-project/holdfast/internal/imageset"
	"github.com/holdfast-project/holdfast/internal/kubeapi"
	"github.com/holdfast-project/holdfast/internal/report"
)

// The synthetic cluster of the scale test: Nodes with no kubelet behind them, each with a NodeImages object as a
// reporter writes it, and one ImageSet selecting them all.
const (
	scaleNodes     = 1000
	scaleHeld      = 500 // images each node holds, a tag and a digest record each
	scaleRequired  = 40  // images each node's workloads need
	scaleSetImages = 500 // images of the set
	scaleLabel     = "holdfast.test/scale"
	scaleSet       = "scale-release"
	scaleWorkers   = 8
)

// The phases of the set's images across the nodes (scaleNodes of them): the first scaleStaged hold every
// image; the next scalePulling hold the first scaleHeldOnLate images and pull or wait for the others; the
// last scaleFailing hold as many, wait for most of the rest and fail the last scaleFailedEach.
const (
	scaleStaged     = 900
	scalePulling    = 80
	scaleFailing    = 20
	scaleHeldOnLate = 400
	scaleFailedEach = 10
	scaleLacking    = 10 // nodes (every 100th) whose workloads lack 2 images
)

// TestNodeImagesAtScale (HOLDFAST_SCALE=1; 2 to 3 minutes on 2 cores with the cluster's start): 1,000 Nodes
// and 1,000 NodeImages objects of 500 held images each (the reporter's packed list, its Required, and one
// ImageSet of 500 images in mixed phases) in the test cluster's API server, and the ImageSet. It logs the
// objects' bytes, the leader's aggregation in-process (list and decode, then imageset.States and Aggregate:
// wall and CPU time) and end to end (holdfast-reporter --leader-elect, from a change of the spec, then of one
// NodeImages, to the status written), holdfast check --cluster's wall and CPU time and peak RSS, and the API
// server's RSS before and after. It asserts the counts in the status and in check's output, never a time.
func TestNodeImagesAtScale(t *testing.T) {
	if os.Getenv("HOLDFAST_SCALE") != "1" {
		t.Skip("HOLDFAST_SCALE=1 runs it (minutes): 1,000 Nodes and NodeImages in the test cluster's API server")
	}
	c := needCluster(t)
	cfg := rest.CopyConfig(c.restConfig)
	cfg.QPS, cfg.Burst = 1000, 2000 // the objects are written as fast as the API server takes them
	client := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	apiserver := c.procs["kube-apiserver"].cmd.Process.Pid
	etcd := c.procs["etcd"].cmd.Process.Pid
	rss0, etcd0 := procStatus(t, apiserver, "VmRSS"), procStatus(t, etcd, "VmRSS")

	applyChartCRDs(t, c, dyn)
	start := time.Now()
	objects, total := createScale(t, client)
	t.Logf("created %d Nodes and %d NodeImages in %.1fs; one NodeImages: %d bytes (node 0) to %d bytes (the last), %.1f MB in all",
		scaleNodes, scaleNodes, time.Since(start).Seconds(), objects[0], objects[len(objects)-1], float64(total)/1e6)
	one := scaleNodeImages(scaleNodes-1, time.Now())
	sets, _ := json.Marshal(one.Sets)
	t.Logf("of the last NodeImages: held %d records packed in %d bytes (base64), its set %d bytes", one.Images, 4*((len(one.Held)+2)/3), len(sets))
	checkStored(t, client)
	set := createScaleSet(t, dyn)
	t.Logf("ImageSet %s: %d images, generation %d", scaleSet, len(set.Spec.Images), set.Metadata.Generation)
	listed := listBytes(t, client)
	t.Logf("GET %s (all, one page): %.1f MB", report.NodeImagesPath, float64(listed)/1e6)

	st := aggregateInProcess(t, c, set)
	checkScaleStatus(t, "in-process Aggregate", st, 0)
	leaderEndToEnd(t, c, dyn, client)
	checkClusterAtScale(t, c)
	t.Logf("kube-apiserver RSS %s before, %s after (peak %s); etcd RSS %s before, %s after", rss0, procStatus(t, apiserver, "VmRSS"),
		procStatus(t, apiserver, "VmHWM"), etcd0, procStatus(t, etcd, "VmRSS"))
}

// scaleDigest is a digest as real as any: the sha256 of s.
func scaleDigest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// setImage is the set's image i; priorImage the release before it, which the nodes hold until they hold the set's.
func setImage(i int) string {
	return fmt.Sprintf("registry.example.com/shop/team-%02d/service-%03d:v2.0.0", i%25, i)
}

func priorImage(i int) string {
	return fmt.Sprintf("registry.example.com/shop/team-%02d/service-%03d:v1.9.%d", i%25, i, i%7)
}

// phaseOf is where the set's image i stands on node n, and its error.
func phaseOf(n, i int) (report.SetPhase, string) {
	switch {
	case n < scaleStaged || i < scaleHeldOnLate:
		return report.SetHeld, ""
	case n < scaleStaged+scalePulling && i < scaleHeldOnLate+50:
		return report.SetPulling, ""
	case n < scaleStaged+scalePulling || i < scaleSetImages-scaleFailedEach:
		return report.SetWaiting, ""
	}
	return report.SetFailed, fmt.Sprintf("pulling %s through the node's mirrors: no peer serves it: GET https://127.0.0.1:30020/v2/: dial tcp 127.0.0.1:30020: connect: connection refused", setImage(i))
}

func scaleNodeName(n int) string { return fmt.Sprintf("scale-%04d", n) }

// scaleNodeImages is node n's NodeImages object as its reporter writes it: what it holds (the set's images it
// holds, the old release's for the others), its workloads' report, and where the set's images stand.
func scaleNodeImages(n int, now time.Time) report.NodeImages {
	var held report.Held
	ss := report.SetState{Name: scaleSet, Generation: 1, Selected: true}
	for i := range scaleHeld {
		ref := priorImage(i)
		phase, msg := phaseOf(n, i)
		if phase == report.SetHeld {
			ref = setImage(i)
		}
		repo, _, _ := strings.Cut(ref, ":v")
		d := scaleDigest(ref)
		held = append(held, report.HeldImage{Name: ref, Digest: d, Pinned: true}, report.HeldImage{Name: repo + "@" + d, Digest: d, Pinned: true})
		img := report.SetImage{Ref: setImage(i), Phase: phase, Error: msg}
		if phase == report.SetFailed {
			img.Since = now.Add(-time.Duration(n) * time.Second).UTC().Truncate(time.Second)
		}
		ss.Images = append(ss.Images, img)
	}
	held.Sort()
	req := report.Required{Known: true, Ready: true, Counts: map[report.State]int{report.Pinned: scaleRequired}, HeldHash: held.Hash()}
	if n%100 == 99 {
		req.Ready, req.Counts[report.Pinned], req.Counts[report.Missing] = false, scaleRequired-2, 2
		for k := range 2 {
			req.NotReady = append(req.NotReady, report.Image{Ref: fmt.Sprintf("registry.example.com/shop/new-%d:v1", k), State: report.Missing,
				UsedBy: []string{fmt.Sprintf("Deployment shop/new-%d containers/app", k)}})
		}
	}
	ni := report.NodeImages{
		APIVersion: report.APIVersion, Kind: report.Kind,
		Metadata: report.ObjectMeta{Name: scaleNodeName(n), Labels: map[string]string{"app.kubernetes.io/managed-by": "holdfast-reporter"}},
		Updated:  now.UTC().Truncate(time.Second), Images: len(held), Pinned: len(held), HeldHash: held.Hash(), Held: held.Pack(),
		Required: &req, Sets: []report.SetState{ss},
	}
	return ni
}

// createScale creates the Nodes (labelled, unschedulable, tainted: nothing lands there) and their NodeImages
// (server-side apply, as the reporter writes them; no owner, so that the garbage collector leaves them) with
// scaleWorkers writers, and removes them when the test ends. It returns the bytes of each NodeImages written,
// and their sum.
func createScale(t *testing.T, client kubernetes.Interface) ([]int, int) {
	ctx := context.Background()
	t.Cleanup(func() { removeScale(t, client) })
	now := time.Now()
	sizes := make([]int, scaleNodes)
	errs := make(chan error, scaleNodes)
	work := make(chan int)
	var wg sync.WaitGroup
	rc := client.CoreV1().RESTClient()
	for range scaleWorkers {
		wg.Go(func() {
			for n := range work {
				node := &corev1.Node{
					ObjectMeta: metav1.ObjectMeta{Name: scaleNodeName(n), Labels: map[string]string{
						scaleLabel: "true", "kubernetes.io/hostname": scaleNodeName(n), "kubernetes.io/os": "linux",
						"topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", n%3)}},
					Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: scaleLabel, Effect: corev1.TaintEffectNoSchedule}}},
				}
				if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					errs <- fmt.Errorf("creating Node %s: %w", node.Name, err)
					continue
				}
				body, err := json.Marshal(scaleNodeImages(n, now))
				if err != nil {
					errs <- err
					continue
				}
				sizes[n] = len(body)
				if err := rc.Patch(types.ApplyPatchType).AbsPath(report.NodeImagesPath, scaleNodeName(n)).
					Param("fieldManager", "holdfast-reporter").Param("force", "true").Body(body).Do(ctx).Error(); err != nil {
					errs <- fmt.Errorf("applying NodeImages %s (%d bytes): %w", scaleNodeName(n), len(body), err)
				}
			}
		})
	}
	for n := range scaleNodes {
		work <- n
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 0
	for _, s := range sizes {
		total += s
	}
	return sizes, total
}

// checkStored reads back the last NodeImages: what the API server keeps of it is what was written (a schema
// that does not know a field prunes it).
func checkStored(t *testing.T, client kubernetes.Interface) {
	n := scaleNodes - 1
	raw, err := client.CoreV1().RESTClient().Get().AbsPath(report.NodeImagesPath, scaleNodeName(n)).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got report.NodeImages
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	want := scaleNodeImages(n, time.Now())
	held, err := report.Unpack(got.Held)
	if err != nil || held.Hash() != want.HeldHash || got.Required == nil || got.Required.Counts[report.Missing] != 2 || len(got.Sets) != 1 ||
		len(got.Sets[0].Images) != scaleSetImages || got.Sets[0].Images[scaleSetImages-1].Phase != report.SetFailed {
		t.Fatalf("NodeImages %s as stored (%d bytes) is not what was written: %v, %d sets, required %+v", scaleNodeName(n), len(raw), err, len(got.Sets), got.Required)
	}
}

// removeScale deletes the synthetic Nodes and NodeImages.
func removeScale(t *testing.T, client kubernetes.Interface) {
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: scaleLabel + "=true"}
	if err := client.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		t.Errorf("deleting the synthetic Nodes: %v", err)
	}
	if err := client.CoreV1().RESTClient().Delete().AbsPath(report.NodeImagesPath).Param("labelSelector", "app.kubernetes.io/managed-by=holdfast-reporter").
		Do(ctx).Error(); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting the synthetic NodeImages: %v", err)
	}
}

var (
	imageSetsGVR = schema.GroupVersionResource{Group: report.Group, Version: report.Version, Resource: imageset.Resource}
	crdGVR       = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// applyChartCRDs creates the chart's CustomResourceDefinitions (helm template of templates/crd.yaml): NodeImages
// and ImageSet, unless there already, and waits until they are established. Those it created go when the test
// ends (with every object of theirs), so that a later helm install owns them.
func applyChartCRDs(t *testing.T, c *cluster, dyn dynamic.Interface) {
	ctx := context.Background()
	out, err := exec.Command(findHelm(t, c.repoBin), "template", "holdfast", filepath.Join(repoRoot(), "deploy", "helm", "holdfast"),
		"--show-only", "templates/crd.yaml").Output()
	if err != nil {
		t.Fatalf("helm template --show-only templates/crd.yaml: %v", err)
	}
	found := map[string]bool{}
	for _, doc := range strings.Split(string(out), "\n---") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("a document of the chart's crd.yaml: %v", err)
		}
		if obj == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		found[u.GetName()] = true
		_, err := dyn.Resource(crdGVR).Create(ctx, u, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(err):
			continue
		case err != nil:
			t.Fatalf("creating CRD %s: %v", u.GetName(), err)
		}
		name := u.GetName()
		t.Cleanup(func() {
			if err := dyn.Resource(crdGVR).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
				t.Errorf("deleting CRD %s: %v", name, err)
			}
		})
	}
	for _, name := range []string{report.Resource + "." + report.Group, imageset.Resource + "." + report.Group} {
		if !found[name] {
			t.Fatalf("the chart's crd.yaml has no CRD %s", name)
		}
		if err := waitFor("CRD "+name+" Established", time.Minute, func() (bool, error) {
			u, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, _ := c.(map[string]any); m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, fmt.Errorf("conditions %v", conds)
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// createScaleSet creates the ImageSet of the set's images, selecting the synthetic Nodes.
func createScaleSet(t *testing.T, dyn dynamic.Interface) imageset.ImageSet {
	var images []any
	for i := range scaleSetImages {
		images = append(images, setImage(i))
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": report.APIVersion, "kind": imageset.Kind, "metadata": map[string]any{"name": scaleSet},
		"spec": map[string]any{"images": images, "nodeSelector": map[string]any{scaleLabel: "true"}},
	}}
	got, err := dyn.Resource(imageSetsGVR).Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating ImageSet %s: %v", scaleSet, err)
	}
	t.Cleanup(func() { _ = dyn.Resource(imageSetsGVR).Delete(context.Background(), scaleSet, metav1.DeleteOptions{}) })
	return decodeImageSet(t, got)
}

func decodeImageSet(t *testing.T, u *unstructured.Unstructured) imageset.ImageSet {
	t.Helper()
	b, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var set imageset.ImageSet
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatalf("decoding ImageSet %s: %v", u.GetName(), err)
	}
	return set
}

// listBytes is the size of the list of every NodeImages object, in one page.
func listBytes(t *testing.T, client kubernetes.Interface) int {
	b, err := client.CoreV1().RESTClient().Get().AbsPath(report.NodeImagesPath).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("GET %s: %v", report.NodeImagesPath, err)
	}
	return len(b)
}

// cpuSelf is the CPU time this process has used, user and system.
func cpuSelf(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// aggregateInProcess is the leader's aggregation done here, timed: the NodeImages and the Nodes listed and
// decoded (as check --cluster reads them, kubeapi), then imageset.States and Aggregate of the set.
func aggregateInProcess(t *testing.T, c *cluster, set imageset.ImageSet) imageset.Status {
	ctx := context.Background()
	kc, err := kubeapi.Connect(kubeapi.Options{Kubeconfig: c.admin})
	if err != nil {
		t.Fatal(err)
	}
	wall, cpu := time.Now(), cpuSelf(t)
	list, bad, err := kc.NodeImages(ctx)
	if err != nil || len(bad) > 0 {
		t.Fatalf("listing the NodeImages: %v %v", err, bad)
	}
	nodes, err := kc.Nodes(ctx, scaleLabel+"=true")
	if err != nil {
		t.Fatal(err)
	}
	listWall, listCPU := time.Since(wall), cpuSelf(t)-cpu
	labels := map[string]map[string]string{}
	for _, n := range nodes {
		labels[n.Name] = n.Labels
	}
	wall, cpu = time.Now(), cpuSelf(t)
	in := make([]imageset.Node, 0, len(list))
	for _, ni := range list {
		in = append(in, imageset.Node{Name: ni.Metadata.Name, Labels: labels[ni.Metadata.Name], Sets: ni.Sets})
	}
	st := imageset.Aggregate(set, imageset.States(set, in), time.Now())
	t.Logf("aggregation in-process: list and decode %d NodeImages and %d Nodes %.2fs wall, %.2fs CPU; States and Aggregate %.3fs wall, %.3fs CPU",
		len(list), len(nodes), listWall.Seconds(), listCPU.Seconds(), time.Since(wall).Seconds(), (cpuSelf(t) - cpu).Seconds())
	return st
}

// checkScaleStatus checks the counts of a status of the set as the synthetic nodes make it, with one more node
// staged (and one less failing) when mended.
func checkScaleStatus(t *testing.T, what string, st imageset.Status, mended int) {
	t.Helper()
	wantMissing := scaleSetImages - scaleHeldOnLate
	if st.Nodes != (imageset.NodeCounts{Selected: scaleNodes, Staged: scaleStaged + mended, Failed: scaleFailing - mended}) ||
		st.MissingImages != wantMissing || len(st.Missing) != min(wantMissing, imageset.MaxMissing) ||
		st.Missing[0].Image != setImage(scaleHeldOnLate) || st.Missing[0].Nodes != scaleNodes-scaleStaged-mended ||
		st.FailureCount != (scaleFailing-mended)*scaleFailedEach || len(st.Failures) != imageset.MaxFailures {
		t.Errorf("%s: nodes %+v, %d images missing (%d listed), %d failures (%d listed); want %d selected, %d staged, %d failed, %d missing, %d failures",
			what, st.Nodes, st.MissingImages, len(st.Missing), st.FailureCount, len(st.Failures), scaleNodes, scaleStaged+mended, scaleFailing-mended,
			wantMissing, (scaleFailing-mended)*scaleFailedEach)
	}
}

// checkClusterAtScale runs holdfast check --cluster on the synthetic nodes, timed, and checks its counts.
func checkClusterAtScale(t *testing.T, c *cluster) {
	cmd := exec.Command(filepath.Join(c.repoBin, "holdfast"), "check", "--cluster", "--kubeconfig", c.admin, "-l", scaleLabel+"=true")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("holdfast check --cluster: %v, want exit 1 (%d nodes lack images)\n%s", err, scaleLacking, stderr.String())
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	t.Logf("holdfast check --cluster of %d nodes: %.2fs wall, %.2fs CPU, max RSS %d MB, %d bytes of output", scaleNodes, wall.Seconds(),
		float64(ru.Utime.Nano()+ru.Stime.Nano())/1e9, ru.Maxrss/1024, stdout.Len())
	out := stdout.String()
	for _, want := range []string{
		fmt.Sprintf("%d nodes: %d ready, %d lacking images (%d missing, 0 unpinned), 0 without a report", scaleNodes, scaleNodes-scaleLacking, scaleLacking, 2*scaleLacking),
		fmt.Sprintf("ImageSet %s (%d images): Staged False (ImagesMissing), nodes %d staged of %d selected, %d failed; %d images missing",
			scaleSet, scaleSetImages, scaleStaged, scaleNodes, scaleFailing, scaleSetImages-scaleHeldOnLate),
		fmt.Sprintf("  missing  %s  on %d nodes: %s, %s, %s and %d more", setImage(scaleHeldOnLate), scaleNodes-scaleStaged,
			scaleNodeName(scaleStaged), scaleNodeName(scaleStaged+1), scaleNodeName(scaleStaged+2), scaleNodes-scaleStaged-3),
		fmt.Sprintf("  failed  %s  %s: pulling", scaleNodeName(scaleStaged+scalePulling), setImage(scaleSetImages-scaleFailedEach)),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("holdfast check --cluster lacks %q:\n%s", want, lastLines(out, 30))
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// scaleAgent stands in for the reporters' agents: it takes every PUT /sets (so that a reporter computes its
// waves again at each change, as beside a real agent) and has no report.
func scaleAgent(t *testing.T, c *cluster) (url, tokenFile string) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Method == http.MethodPut && r.URL.Path == "/sets" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	tokenFile = filepath.Join(c.dir, "scale-token")
	if err := os.WriteFile(tokenFile, []byte("scale"), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv.URL, tokenFile
}

// scaleReporter starts holdfast-reporter --required --imagesets --leader-elect for the synthetic node n, as the
// chart runs it on every node, its agent the stand-in scaleAgent.
func scaleReporter(t *testing.T, c *cluster, n int) *proc {
	bin := filepath.Join(c.repoBin, "holdfast-reporter")
	if help, _ := exec.Command(bin, "--help").CombinedOutput(); !strings.Contains(string(help), "--leader-elect") {
		t.Fatalf("%s has no --leader-elect (make build)", bin)
	}
	name := fmt.Sprintf("scale-reporter-%d", n)
	agent, token := scaleAgent(t, c)
	p, err := startProc(name, c.logPath(name), append(c.env(), "POD_NAMESPACE=default"), bin,
		"--node", scaleNodeName(n), "--agent", agent, "--kubeconfig", c.admin, "--token-file", token,
		"--required", "--imagesets", "--leader-elect", "--lease-name", "holdfast-scale")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.stop(10 * time.Second) })
	return p
}

// leaderEndToEnd runs a reporter on the first synthetic node and times, from each change, the status it writes
// as the leader: its first (its informers' lists included), after a change of the set's spec (maxConcurrent: a
// new generation), after one node's NodeImages says the node holds every image, and after it says otherwise
// again. A second reporter, on the second node, started once the first leads, stands for election too and
// does not lead: it keeps the caches of the waves only. It logs each reporter's CPU-seconds for each step and
// their RSS, and checks the counts of each status.
func leaderEndToEnd(t *testing.T, c *cluster, dyn dynamic.Interface, client kubernetes.Interface) {
	ctx := context.Background()
	p := scaleReporter(t, c, 0)
	pid := p.cmd.Process.Pid
	var follower *proc
	step := func(what string, change func() int64, mended int) {
		t.Helper()
		cpu, start := cpuSeconds(t, pid), time.Now()
		fcpu := 0.0
		if follower != nil {
			fcpu = cpuSeconds(t, follower.cmd.Process.Pid)
		}
		gen := change()
		var st imageset.Status
		if err := waitFor("the leader's status of "+scaleSet+" "+what, 5*time.Minute, func() (bool, error) {
			u, err := dyn.Resource(imageSetsGVR).Get(ctx, scaleSet, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			set := decodeImageSet(t, u)
			st = set.Status
			for _, cond := range st.Conditions {
				if cond.ObservedGeneration < gen {
					return false, fmt.Errorf("observed generation %d, want %d", cond.ObservedGeneration, gen)
				}
			}
			ok := len(st.Conditions) == 2 && st.Nodes.Staged == scaleStaged+mended
			return ok, fmt.Errorf("status %d conditions, nodes %+v", len(st.Conditions), st.Nodes)
		}, p); err != nil {
			t.Fatal(err)
		}
		wall, used := time.Since(start), cpuSeconds(t, pid)-cpu
		// The waves (of both reporters) see the change too, after their debounce: the CPU again a moment later.
		time.Sleep(3 * time.Second)
		msg := fmt.Sprintf("leader: status %s in %.2fs, the reporter's CPU %.2fs to it, %.2fs 3 s later", what, wall.Seconds(), used,
			cpuSeconds(t, pid)-cpu)
		if follower != nil {
			msg += fmt.Sprintf("; the other reporter's CPU %.2fs", cpuSeconds(t, follower.cmd.Process.Pid)-fcpu)
		}
		t.Log(msg)
		checkScaleStatus(t, "the leader's status "+what, st, mended)
	}
	step("first written, from the reporter's start", func() int64 { return 1 }, 0)
	t.Logf("leader: the reporter's RSS %s (peak %s) once it wrote its first status", procStatus(t, pid, "VmRSS"), procStatus(t, pid, "VmHWM"))
	follower = scaleReporter(t, c, 1)
	fstart := time.Now()
	if err := waitFor("the other reporter's caches", 5*time.Minute, func() (bool, error) {
		b, err := os.ReadFile(follower.log)
		return bytes.Contains(b, []byte("watching the ImageSets")), err
	}, follower); err != nil {
		t.Fatal(err)
	}
	fpid := follower.cmd.Process.Pid
	t.Logf("the other reporter: its caches synced %.2fs after its start, CPU %.2fs, RSS %s (peak %s)", time.Since(fstart).Seconds(),
		cpuSeconds(t, fpid), procStatus(t, fpid, "VmRSS"), procStatus(t, fpid, "VmHWM"))
	step("after a change of the spec", func() int64 {
		patch := []byte(`{"spec":{"maxConcurrent":32}}`)
		u, err := dyn.Resource(imageSetsGVR).Patch(ctx, scaleSet, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return u.GetGeneration()
	}, 0)
	last := scaleNodes - 1
	mend := func(held bool) func() int64 {
		return func() int64 {
			ni := scaleNodeImages(last, time.Now())
			if held {
				for i := range ni.Sets[0].Images {
					ni.Sets[0].Images[i] = report.SetImage{Ref: ni.Sets[0].Images[i].Ref, Phase: report.SetHeld}
				}
			}
			body, _ := json.Marshal(ni)
			if err := client.CoreV1().RESTClient().Patch(types.ApplyPatchType).AbsPath(report.NodeImagesPath, scaleNodeName(last)).
				Param("fieldManager", "holdfast-reporter").Param("force", "true").Body(body).Do(ctx).Error(); err != nil {
				t.Fatal(err)
			}
			return 2
		}
	}
	step("after one node's NodeImages says it holds every image", mend(true), 1)
	step("after it says otherwise again", mend(false), 0)
	t.Logf("leader: the reporter's RSS %s, peak %s; the other reporter's RSS %s, peak %s", procStatus(t, pid, "VmRSS"), procStatus(t, pid, "VmHWM"),
		procStatus(t, fpid, "VmRSS"), procStatus(t, fpid, "VmHWM"))
	if b, err := os.ReadFile(follower.log); err != nil || bytes.Contains(b, []byte("leading: writing")) {
		t.Errorf("the other reporter led (%v): only the first should", err)
	}
}

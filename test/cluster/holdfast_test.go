package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Names of the chart's objects in the test: release holdfast in namespace holdfast-system.
const (
	release      = "holdfast"
	chartNS      = "holdfast-system"
	criPinLabel  = "io.cri-containerd.pinned"
	ownedLabel   = "io.holdfast.pinned"
	condition    = "HoldfastPinned"
	criNamespace = "k8s.io"
)

// Test images: the pause binary in images of their own (a label in the config makes each ID distinct).
const (
	imgPinA    = "holdfast.test/pin-a:1"    // imported unpinned; the chart's first pins: list names it
	imgPinB    = "holdfast.test/pin-b:1"    // imported unpinned; the upgraded pins: list names it
	imgFromDir = "holdfast.test/from-dir:1" // an archive in the node's images dir
	imgLoose   = "holdfast.test/unpinned:1" // imported unpinned and never pinned: image GC removes it
	imgProbe   = "holdfast.test/probe:1"    // imported unpinned; labelled to prove the event watch live
	brokenName = "broken.tar"               // half an archive, in the node's images dir
)

// TestHoldfastOnNode is holdfast's life on a node, in order (each step builds on the one before): the air-gap
// bootstrap of its own image, the chart installed and upgraded, the Node condition and Events, the kubelet's
// image GC under disk pressure, and a rolling restart and uninstall that never drop a pin.
func TestHoldfastOnNode(t *testing.T) {
	c := needCluster(t)
	s := &scenario{c: c}
	t.Cleanup(func() {
		if s.installed {
			if out, err := s.runHelm("uninstall", release, "--namespace", chartNS); err != nil {
				t.Errorf("helm uninstall: %v\n%s", err, out)
			}
		}
	})
	steps := []struct {
		name string
		f    func(*testing.T)
	}{
		{"bootstrap-own-image", s.bootstrap},
		{"helm-install", s.install},
		{"helm-upgrade-pins", s.upgradePins},
		{"node-condition-and-events", s.conditionAndEvents},
		{"required-images-condition", s.requiredImages},
		{"reporter-under-load", s.reporterUnderLoad},
		{"reporter-writes-only-its-own-node", s.ownNodeOnly},
		{"missing-node-paths-turn-features-off", s.missingNodePaths},
		{"kubelet-image-gc-keeps-pins", s.imageGC},
		{"rollout-restart-and-uninstall-keep-pins", s.restartAndUninstall},
	}
	for _, st := range steps {
		if !t.Run(st.name, st.f) {
			t.Fatalf("step %s failed; the steps after it build on it", st.name)
		}
	}
}

// scenario carries what the steps of TestHoldfastOnNode hand on to each other.
type scenario struct {
	c         *cluster
	ownImage  string // holdfast's own image, REPO:VERSION
	helm      string
	chart     string
	helmEnv   []string
	dataDir   string // the chart's dataDir on the node
	installed bool
}

// repoFile finds a file the repo's make targets write into bin/ (the cluster's repoBin).
func (s *scenario) repoFile(t *testing.T, name, makeTarget string) string {
	t.Helper()
	p := filepath.Join(s.c.repoBin, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing (make %s writes it): %v", p, makeTarget, err)
	}
	return p
}

// bootstrap: `holdfast sync` imports holdfast's own image archive into the node's containerd (the air-gap
// bootstrap: no registry), and the CRI reports it pinned.
func (s *scenario) bootstrap(t *testing.T) {
	c := s.c
	tarPath := s.repoFile(t, "holdfast-image.tar", "image")
	nameFile := s.repoFile(t, "holdfast-image.name", "image")
	b, err := os.ReadFile(nameFile)
	if err != nil {
		t.Fatal(err)
	}
	s.ownImage = strings.TrimSpace(string(b))
	// Into the node's images dir, where the agent finds it again once the chart runs.
	if err := copyFile(tarPath, filepath.Join(c.imagesDir, "holdfast-image.tar")); err != nil {
		t.Fatal(err)
	}
	if out, err := c.holdfast("sync", "--images", c.imagesDir); err != nil {
		t.Fatalf("holdfast sync: %v\n%s", err, out)
	}
	for _, ref := range []string{s.ownImage, pauseImage} {
		if pinned, err := c.criPinned(ref); err != nil || !pinned {
			t.Errorf("after holdfast sync, %s: pinned=%v (%v)", ref, pinned, err)
		}
	}
}

// install: the chart (runtime containerd, the test node's paths) runs holdfast and its reporter; the pod
// becomes Ready; the pins: list and the archives in the images dir are pinned.
func (s *scenario) install(t *testing.T) {
	c := s.c
	s.helm = findHelm(t, c.repoBin)
	s.chart = filepath.Join(repoRoot(), "deploy", "helm", "holdfast")
	if _, err := os.Stat(filepath.Join(s.chart, "Chart.yaml")); err != nil {
		t.Fatalf("the chart is missing: %v", err)
	}
	helmHome := filepath.Join(c.dir, "helm")
	s.helmEnv = append(c.env(), "KUBECONFIG="+c.admin,
		"HELM_CACHE_HOME="+helmHome+"/cache", "HELM_CONFIG_HOME="+helmHome+"/config", "HELM_DATA_HOME="+helmHome+"/data")
	// Two images brought by something else (unpinned), and one archive for the agent to import.
	for _, ref := range []string{imgPinA, imgPinB} {
		if err := c.importUnpinned(ref); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeStaticImage(filepath.Join(c.imagesDir, "from-dir.tar"), imgFromDir, filepath.Join(c.k8sBin, "pause"), "/pause",
		map[string]string{"holdfast.test": "from-dir"}); err != nil {
		t.Fatal(err)
	}
	s.dataDir = filepath.Join(c.dir, "holdfast-data")

	start := time.Now()
	if out, err := s.runHelm("install", release, s.chart, "--namespace", chartNS, "--create-namespace",
		"--values", s.values(t, []string{imgPinA})); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	s.installed = true
	pod := s.waitAgentReady(t, "")
	t.Logf("helm install to pod %s Ready: %.1fs", pod.Name, time.Since(start).Seconds())

	for _, ref := range []string{imgPinA, imgFromDir, s.ownImage, pauseImage} {
		ref := ref
		if err := waitFor(ref+" pinned", 2*time.Minute, func() (bool, error) { return c.criPinned(ref) }); err != nil {
			t.Errorf("%v\n%s", err, s.agentLogs())
		}
	}
	if pinned, err := c.criPinned(imgPinB); err != nil || pinned {
		t.Errorf("%s is not in the pins: list, yet pinned=%v (%v)", imgPinB, pinned, err)
	}
	// directWrites: the pod, with every capability dropped, can write blobs into the node's content store
	// itself (it made its temp dir there, and found containerd's blobs in it). from-dir.tar's one layer is
	// the pause image's, present already.
	logs := s.containerLog(t, pod.Name, "holdfast")
	root := filepath.Join(c.dir, "containerd", "root", "io.containerd.content.v1.content")
	if !strings.Contains(logs, `"msg":"imports write blobs directly into the content store","writePath":"auto","contentRoot":"`+root+`"`) {
		t.Errorf("the agent does not write blobs directly into %s:\n%s", root, logs)
	}
	if fi, err := os.Stat(filepath.Join(root, "holdfast-tmp")); err != nil || !fi.IsDir() {
		t.Errorf("no holdfast-tmp in the node's content store: %v", err)
	}
}

// missingNodePaths: a node without the content store directory the chart names, and without the directory of
// registries.yaml, still starts the agent. It becomes Ready, writes no blob into that directory, creates no
// registries.yaml, and records a FeatureOff Event on the Node naming each path. Back on the node's own paths, it
// writes blobs directly again.
func (s *scenario) missingNodePaths(t *testing.T) {
	c := s.c
	elsewhere := filepath.Join(c.dir, "elsewhere", "io.containerd.content.v1.content")
	regYAML := filepath.Join(c.dir, "no-rancher-etc", "registries.yaml")
	for _, p := range []string{filepath.Dir(elsewhere), filepath.Dir(regYAML)} {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(p) })
	}
	before := s.agentPod(t)
	if out, err := s.runHelm("upgrade", release, s.chart, "--namespace", chartNS,
		"--values", s.values(t, []string{imgPinB}, map[string]any{"contentRoot": elsewhere, "registriesYaml": regYAML})); err != nil {
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}
	pod := s.waitAgentReady(t, before.UID)
	for _, path := range []string{elsewhere, regYAML} {
		if err := c.waitNodeWarning("FeatureOff", path); err != nil {
			t.Errorf("%v\n%s", err, s.agentLogs())
		}
	}
	if entries, err := os.ReadDir(elsewhere); err != nil || len(entries) != 0 {
		t.Errorf("%s, not the node's content store, holds %d entries (%v)", elsewhere, len(entries), err)
	}
	if _, err := os.Stat(regYAML); !os.IsNotExist(err) {
		t.Errorf("%s was created on the node: %v", regYAML, err)
	}
	if logs := s.containerLog(t, pod.Name, "holdfast"); strings.Contains(logs, `"msg":"imports write blobs directly into the content store"`) {
		t.Errorf("the agent writes blobs directly into a directory that is not the node's content store:\n%s", logs)
	}

	if out, err := s.runHelm("upgrade", release, s.chart, "--namespace", chartNS,
		"--values", s.values(t, []string{imgPinB})); err != nil {
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}
	pod = s.waitAgentReady(t, pod.UID)
	root := filepath.Join(c.dir, "containerd", "root", "io.containerd.content.v1.content")
	if logs := s.containerLog(t, pod.Name, "holdfast"); !strings.Contains(logs, `"msg":"imports write blobs directly into the content store","writePath":"auto","contentRoot":"`+root+`"`) {
		t.Errorf("back on the node's own paths, the agent does not write blobs directly into %s:\n%s", root, logs)
	}
}

// containerLog returns the whole log of one container of a pod.
func (s *scenario) containerLog(t *testing.T, pod, ctr string) string {
	t.Helper()
	r, err := s.c.client.CoreV1().Pods(chartNS).GetLogs(pod, &corev1.PodLogOptions{Container: ctr}).Stream(context.Background())
	if err != nil {
		t.Fatalf("logs of %s/%s: %v", pod, ctr, err)
	}
	defer r.Close()
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("logs of %s/%s: %v", pod, ctr, err)
	}
	return string(out)
}

// upgradePins: `helm upgrade` with another pins: list moves the pin from A to B without restarting the pod.
func (s *scenario) upgradePins(t *testing.T) {
	c := s.c
	before := s.agentPod(t)
	start := time.Now()
	if out, err := s.runHelm("upgrade", release, s.chart, "--namespace", chartNS,
		"--values", s.values(t, []string{imgPinB})); err != nil {
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}
	if err := waitFor(imgPinB+" pinned and "+imgPinA+" unpinned", 3*time.Minute, func() (bool, error) {
		b, err := c.criPinned(imgPinB)
		if err != nil || !b {
			return false, err
		}
		a, err := c.criPinned(imgPinA)
		return err == nil && !a, err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("helm upgrade to %s pinned (and %s unpinned): %.1fs", imgPinB, imgPinA, time.Since(start).Seconds())
	if after := s.agentPod(t); after.UID != before.UID {
		t.Errorf("the pins: change restarted the pod (%s -> %s); it should reach the running agent", before.Name, after.Name)
	}
}

// conditionAndEvents: a broken archive in the images dir turns the node condition HoldfastPinned False
// (SourcesFailing, naming it) and records a SourceFailed Event on the Node; removing it turns it True again.
func (s *scenario) conditionAndEvents(t *testing.T) {
	c := s.c
	if err := waitFor("condition "+condition+" True/AllPinned", 2*time.Minute, func() (bool, error) {
		return c.nodeCondition(condition, corev1.ConditionTrue, "AllPinned", "")
	}); err != nil {
		t.Fatal(err)
	}
	whole := filepath.Join(c.dir, "whole.tar")
	if err := writeStaticImage(whole, "holdfast.test/broken:1", filepath.Join(c.k8sBin, "pause"), "/pause", nil); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(whole)
	if err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(c.imagesDir, brokenName)
	if err := writeFileAtomic(broken, b[:len(b)/2]); err != nil {
		t.Fatal(err)
	}
	if err := waitFor("condition "+condition+" False/SourcesFailing naming "+brokenName, 2*time.Minute, func() (bool, error) {
		return c.nodeCondition(condition, corev1.ConditionFalse, "SourcesFailing", brokenName)
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.waitNodeWarning("SourceFailed", brokenName); err != nil {
		t.Error(err)
	}
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	if err := waitFor("condition "+condition+" True/AllPinned again", 2*time.Minute, func() (bool, error) {
		return c.nodeCondition(condition, corev1.ConditionTrue, "AllPinned", "")
	}); err != nil {
		t.Error(err)
	}
}

// imageGC: the kubelet, restarted under disk pressure (an eviction threshold above the free space) with image
// GC thresholds low, removes an unpinned image and keeps every image holdfast pinned. A Deployment needs the
// unpinned image: HoldfastImagesReady says it is unpinned, then missing once the kubelet's GC removed it. The holdfast pod is
// system-node-critical: the kubelet does not evict it. The normal kubelet is restored after.
func (s *scenario) imageGC(t *testing.T) {
	c := s.c
	if err := c.importUnpinned(imgLoose); err != nil {
		t.Fatal(err)
	}
	// A workload needs the unpinned image: the node says it is unpinned, and missing once the GC has it.
	c.deployNeeding(t, "needs-loose", imgLoose)
	c.waitImagesReady(t, "False, "+imgLoose+" unpinned", corev1.ConditionFalse, "ImagesUnpinned", imgLoose)
	wanted := []string{pauseImage, s.ownImage, imgPinB, imgFromDir}
	for _, ref := range wanted {
		if pinned, err := c.criPinned(ref); err != nil || !pinned {
			t.Fatalf("before the pressure, %s: pinned=%v (%v)", ref, pinned, err)
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Join(c.dir, "containerd", "root"), &st); err != nil {
		t.Fatal(err)
	}
	free := float64(st.Bavail) / float64(st.Blocks) * 100
	if free > 98 {
		t.Fatalf("the disk is %.1f%% free: no eviction threshold (<100%%, which the kubelet ignores) lies above that", free)
	}
	threshold := fmt.Sprintf("%d%%", int(math.Ceil(free+(100-free)/2)))
	t.Logf("disk %.0f%% free; eviction threshold %s", free, threshold)
	cfg := c.defaultKubeletConfig()
	cfg["evictionHard"] = map[string]any{"imagefs.available": threshold, "nodefs.available": threshold}
	cfg["imageGCHighThresholdPercent"] = 2
	cfg["imageGCLowThresholdPercent"] = 1
	cfg["imageMinimumGCAge"] = "1s" // 0 means the default, 2 minutes
	restored := false
	restore := func() error {
		if restored {
			return nil
		}
		restored = true
		return c.restartKubelet(c.defaultKubeletConfig())
	}
	t.Cleanup(func() {
		if err := restore(); err != nil {
			t.Errorf("restoring the kubelet: %v", err)
		}
	})
	start := time.Now()
	if err := c.restartKubelet(cfg); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(imgLoose+" removed by the kubelet's image GC", 3*time.Minute, func() (bool, error) {
		_, found, err := c.criImage(imgLoose)
		return err == nil && !found, err
	}, c.procs["kubelet"]); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubelet restarted under pressure to %s removed: %.1fs", imgLoose, time.Since(start).Seconds())
	c.waitImagesReady(t, "False, "+imgLoose+" collected by the kubelet's image GC", corev1.ConditionFalse, "ImagesMissing", imgLoose)
	if err := waitFor("the node to report DiskPressure", time.Minute, func() (bool, error) {
		return c.nodeCondition(string(corev1.NodeDiskPressure), corev1.ConditionTrue, "", "")
	}); err != nil {
		t.Error(err)
	}
	// What holdfast unpinned (the first pins: list) is the kubelet's to collect again.
	if err := waitFor(imgPinA+", unpinned by the upgrade, removed by the image GC", time.Minute, func() (bool, error) {
		_, found, err := c.criImage(imgPinA)
		return err == nil && !found, err
	}); err != nil {
		t.Error(err)
	}
	for _, ref := range wanted {
		pinned, found, err := c.criImage(ref)
		if err != nil || !found || !pinned {
			t.Errorf("under disk pressure, %s: found=%v pinned=%v (%v)", ref, found, pinned, err)
		}
	}
	pod := s.agentPod(t)
	if pod.Status.Phase != corev1.PodRunning {
		t.Errorf("the holdfast pod %s is %s under disk pressure (%s): critical pods are not evicted", pod.Name, pod.Status.Phase, pod.Status.Reason)
	}
	start = time.Now()
	if err := restore(); err != nil {
		t.Fatalf("restoring the kubelet: %v", err)
	}
	if err := waitFor("DiskPressure to clear", 2*time.Minute, func() (bool, error) {
		return c.nodeCondition(string(corev1.NodeDiskPressure), corev1.ConditionFalse, "", "")
	}); err != nil {
		t.Error(err)
	}
	t.Logf("normal kubelet back, DiskPressure cleared: %.1fs", time.Since(start).Seconds())
}

// restartAndUninstall: a rollout restart of the DaemonSet (the restartedAt annotation `kubectl rollout
// restart` sets) replaces the pod, and at no moment during it does a wanted image lose its pin label:
// containerd's image events and a tight poll of the records both say so. `helm uninstall` leaves the pins.
func (s *scenario) restartAndUninstall(t *testing.T) {
	c := s.c
	ctx := context.Background()
	cli, err := containerd.New(c.sock, containerd.WithDefaultNamespace(criNamespace))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// Every record holdfast owns now (tags and their name@digest twins), and the four tags for sure.
	owned, err := cli.ImageService().List(namespaces.WithNamespace(ctx, criNamespace), `labels."`+ownedLabel+`"==pinned`)
	if err != nil {
		t.Fatal(err)
	}
	wanted := []string{pauseImage, s.ownImage, imgPinB, imgFromDir}
	for _, img := range owned {
		if !slices.Contains(wanted, img.Name) {
			wanted = append(wanted, img.Name)
		}
	}
	t.Logf("watching the pins of %d records: %s", len(wanted), strings.Join(wanted, ", "))
	w := watchPins(ctx, t, cli, wanted)
	// The event stream is live: a label put on an image the watch does not judge shows up in it.
	if err := c.importUnpinned(imgProbe); err != nil {
		w.stop()
		t.Fatal(err)
	}
	probe := images.Image{Name: imgProbe, Labels: map[string]string{"holdfast.test/probe": "1"}}
	if _, err := cli.ImageService().Update(namespaces.WithNamespace(ctx, criNamespace), probe, "labels.holdfast.test/probe"); err != nil {
		w.stop()
		t.Fatalf("labelling %s: %v", imgProbe, err)
	}
	if err := waitFor("containerd's event for the probe label on "+imgProbe, 30*time.Second, func() (bool, error) {
		return w.sawProbe(imgProbe), nil
	}); err != nil {
		w.stop()
		t.Fatal(err)
	}

	old := s.agentPod(t)
	ds := s.daemonSet(t)
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`,
		time.Now().Format(time.RFC3339))
	start := time.Now()
	if _, err := c.client.AppsV1().DaemonSets(chartNS).Patch(ctx, ds.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		w.stop()
		t.Fatalf("patching daemonset %s/%s: %v", chartNS, ds.Name, err)
	}
	pod := s.waitAgentReady(t, old.UID)
	t.Logf("rollout restart to new pod %s Ready: %.1fs", pod.Name, time.Since(start).Seconds())

	if out, err := s.runHelm("uninstall", release, "--namespace", chartNS); err != nil {
		w.stop()
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	s.installed = false
	if err := waitFor("the holdfast pods gone", 2*time.Minute, func() (bool, error) {
		pods, err := c.client.CoreV1().Pods(chartNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(pods.Items) == 0, fmt.Errorf("%d pods left", len(pods.Items))
	}); err != nil {
		t.Error(err)
	}
	violations, events := w.stop()
	t.Logf("watched %d image events during the restart and uninstall", events)
	for _, v := range violations {
		t.Error(v)
	}
	// The CRI's view of the tags, and the records' labels for every name (the CRI lists name@digest records
	// only as digests of their tag).
	for _, ref := range []string{pauseImage, s.ownImage, imgPinB, imgFromDir} {
		if pinned, err := c.criPinned(ref); err != nil || !pinned {
			t.Errorf("after helm uninstall, %s: pinned=%v (%v)", ref, pinned, err)
		}
	}
	for _, ref := range wanted {
		img, err := cli.ImageService().Get(namespaces.WithNamespace(ctx, criNamespace), ref)
		if err != nil || img.Labels[criPinLabel] != "pinned" {
			t.Errorf("after helm uninstall, record %s: labels %v (%v)", ref, img.Labels, err)
		}
	}
}

// values writes the chart values for the test node and returns the file.
func (s *scenario) values(t *testing.T, pins []string, overrides ...map[string]any) string {
	t.Helper()
	repo, tag, ok := cutLast(s.ownImage, ":")
	if !ok {
		t.Fatalf("holdfast's image name %q has no tag", s.ownImage)
	}
	d := filepath.Join(s.c.dir, "containerd")
	v := map[string]any{
		"runtime":          "containerd",
		"containerdSocket": s.c.sock,
		"imagesDir":        s.c.imagesDir,
		"dataDir":          s.dataDir,
		"certsDir":         filepath.Join(d, "certs.d"),
		"contentRoot":      filepath.Join(d, "root", "io.containerd.content.v1.content"),
		"registriesYaml":   "none",
		"pins":             pins,
		"image":            map[string]any{"repository": repo, "tag": tag, "pullPolicy": "IfNotPresent"},
		"reporter":         map[string]any{"interval": "2s"},
		"logLevel":         "debug",
		"directWrites":     true,
	}
	for _, o := range overrides {
		for k, val := range o {
			v[k] = val
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(s.c.dir, "values-*.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 || strings.Contains(s[i:], "/") {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}

func (s *scenario) runHelm(args ...string) (string, error) {
	cmd := exec.Command(s.helm, args...)
	cmd.Env = s.helmEnv
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// agentPod returns the chart's one pod (the newest when two exist for a moment).
func (s *scenario) agentPod(t *testing.T) *corev1.Pod {
	t.Helper()
	pods, err := s.c.client.CoreV1().Pods(chartNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) == 0 {
		t.Fatalf("no pod in %s", chartNS)
	}
	newest := &pods.Items[0]
	for i := range pods.Items {
		if pods.Items[i].CreationTimestamp.After(newest.CreationTimestamp.Time) {
			newest = &pods.Items[i]
		}
	}
	return newest
}

// waitAgentReady waits until the DaemonSet has one pod, other than notUID, Ready on the node, and returns it.
func (s *scenario) waitAgentReady(t *testing.T, notUID types.UID) *corev1.Pod {
	t.Helper()
	var ready *corev1.Pod
	err := waitFor("the holdfast pod Ready", 3*time.Minute, func() (bool, error) {
		pods, err := s.c.client.CoreV1().Pods(chartNS).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var why []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.UID == notUID || p.DeletionTimestamp != nil {
				why = append(why, p.Name+" is the old pod")
				continue
			}
			if podReady(p) {
				ready = p
				return true, nil
			}
			why = append(why, p.Name+": "+string(p.Status.Phase)+" "+podProblems(p))
		}
		dss, err := s.c.client.AppsV1().DaemonSets(chartNS).List(context.Background(), metav1.ListOptions{})
		if err == nil {
			for i := range dss.Items {
				why = append(why, daemonSetStatus(&dss.Items[i]))
			}
		}
		return false, fmt.Errorf("%s", strings.Join(why, "; "))
	}, s.c.procs["kubelet"])
	if err != nil {
		t.Fatalf("%v\n%s", err, s.agentLogs())
	}
	return ready
}

// daemonSet returns the chart's one DaemonSet.
func (s *scenario) daemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	dss, err := s.c.client.AppsV1().DaemonSets(chartNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(dss.Items) != 1 {
		t.Fatalf("want one DaemonSet in %s, got %d", chartNS, len(dss.Items))
	}
	return &dss.Items[0]
}

func podReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

func daemonSetStatus(ds *appsv1.DaemonSet) string {
	return fmt.Sprintf("daemonset %s: desired %d, ready %d, updated %d", ds.Name, ds.Status.DesiredNumberScheduled, ds.Status.NumberReady, ds.Status.UpdatedNumberScheduled)
}

// agentLogs returns the last lines of every container of every chart pod.
func (s *scenario) agentLogs() string {
	ctx := context.Background()
	pods, err := s.c.client.CoreV1().Pods(chartNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	tail := int64(30)
	for _, p := range pods.Items {
		for _, container := range p.Spec.Containers { // holdfast, the reporter, spegel with peers
			ctr := container.Name
			r, err := s.c.client.CoreV1().Pods(chartNS).GetLogs(p.Name, &corev1.PodLogOptions{Container: ctr, TailLines: &tail}).Stream(ctx)
			if err != nil {
				fmt.Fprintf(&b, "--- %s/%s: %v\n", p.Name, ctr, err)
				continue
			}
			out, _ := io.ReadAll(r)
			r.Close()
			fmt.Fprintf(&b, "--- %s/%s:\n%s\n", p.Name, ctr, out)
		}
	}
	return b.String()
}

// nodeCondition says whether the node's condition typ has status (and reason, and a message containing
// msgPart, where given).
func (c *cluster) nodeCondition(typ string, status corev1.ConditionStatus, reason, msgPart string) (bool, error) {
	return c.conditionOf(nodeName, typ, status, reason, msgPart)
}

// conditionOf is nodeCondition of the node name.
func (c *cluster) conditionOf(name, typ string, status corev1.ConditionStatus, reason, msgPart string) (bool, error) {
	n, err := c.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	for _, cond := range n.Status.Conditions {
		if string(cond.Type) != typ {
			continue
		}
		if cond.Status == status && (reason == "" || cond.Reason == reason) && strings.Contains(cond.Message, msgPart) {
			return true, nil
		}
		return false, fmt.Errorf("condition %s is %s/%s: %s", typ, cond.Status, cond.Reason, cond.Message)
	}
	return false, fmt.Errorf("node has no condition %s", typ)
}

// criImage reports whether the CRI knows ref, and whether it reports it pinned.
func (c *cluster) criImage(ref string) (pinned, found bool, err error) {
	return criImageVia(c.crictl, ref)
}

// criImageVia is criImage through a node's crictl.
func criImageVia(crictl func(...string) (string, error), ref string) (pinned, found bool, err error) {
	out, err := crictl("images", "-o", "json")
	if err != nil {
		return false, false, err
	}
	var list struct {
		Images []struct {
			RepoTags []string `json:"repoTags"`
			Pinned   bool     `json:"pinned"`
		} `json:"images"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return false, false, fmt.Errorf("reading crictl images -o json: %w", err)
	}
	for _, img := range list.Images {
		if slices.Contains(img.RepoTags, ref) {
			return img.Pinned, true, nil
		}
	}
	return false, false, nil
}

// criPinned says whether the CRI reports ref pinned; an image it does not know is an error.
func (c *cluster) criPinned(ref string) (bool, error) {
	pinned, found, err := c.criImage(ref)
	if err == nil && !found {
		err = fmt.Errorf("the CRI does not know %s", ref)
	}
	return pinned, err
}

// importUnpinned imports an image of the pause binary named ref with containerd's own importer, as a user's
// `ctr images import` would: no holdfast label, no pin.
func (c *cluster) importUnpinned(ref string) error {
	file := filepath.Join(c.dir, strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
	if err := writeStaticImage(file, ref, filepath.Join(c.k8sBin, "pause"), "/pause", map[string]string{"holdfast.test": ref}); err != nil {
		return err
	}
	cli, err := containerd.New(c.sock, containerd.WithDefaultNamespace(criNamespace))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", c.sock, err)
	}
	defer cli.Close()
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	ctx := namespaces.WithNamespace(context.Background(), criNamespace)
	if _, err := cli.Import(ctx, f); err != nil {
		return fmt.Errorf("importing %s as %s: %w", file, ref, err)
	}
	return waitFor("the CRI to list "+ref, time.Minute, func() (bool, error) {
		pinned, found, err := c.criImage(ref)
		if found && pinned {
			return false, fmt.Errorf("%s is pinned right after a plain import", ref)
		}
		return found, err
	})
}

func findHelm(t *testing.T, repoBin string) string {
	t.Helper()
	cands := []string{filepath.Join(repoBin, "helm")}
	if home, err := os.UserHomeDir(); err == nil {
		cands = append(cands, filepath.Join(home, ".cache", "holdfast", "helm", "v4.3.2", "helm"))
	}
	for _, p := range cands {
		if executable(p) {
			return p
		}
	}
	t.Fatalf("helm is missing (make deps builds it): looked at %s", strings.Join(cands, ", "))
	return ""
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return writeFileAtomic(dst, b)
}

// writeFileAtomic writes b to a .tmp file beside path (holdfast skips *.tmp) and renames it into place.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// waitNodeWarning waits (a minute at most) for a Warning Event with reason on
// the test's Node whose message names what.
func (c *cluster) waitNodeWarning(reason, what string) error {
	ctx := context.Background()
	node, err := c.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return waitFor("a "+reason+" Event on the Node naming "+what, time.Minute, func() (bool, error) {
		evs, err := c.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + nodeName + ",reason=" + reason,
		})
		if err != nil {
			return false, err
		}
		var seen []string
		for _, e := range evs.Items {
			if strings.Contains(e.Message, what) && e.InvolvedObject.UID == node.UID && e.Type == corev1.EventTypeWarning {
				return true, nil
			}
			seen = append(seen, e.Type+" "+e.Message)
		}
		return false, fmt.Errorf("%s events so far: %q", reason, seen)
	})
}

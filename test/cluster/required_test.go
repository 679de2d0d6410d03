package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/holdfast-project/holdfast/internal/report"
)

// Images of the required-images step.
const (
	imgRequired = "holdfast.test/required:1" // a Deployment needs it; no archive holds it until the step drops one
	imgCollect  = "holdfast.test/collect:1"  // a Deployment needs it; imported unpinned, then removed as image GC does
	imagesReady = "HoldfastImagesReady"
	workloadNS  = "default"
)

// requiredImages: the node's condition HoldfastImagesReady follows the workloads: a Deployment whose image no
// archive holds turns it False naming the image; an archive of it dropped into the images dir turns it True;
// an image a Deployment needs that is present but unpinned turns it False (ImagesUnpinned), and missing once
// removed as the kubelet's image GC removes it (CRI RemoveImage); the Deployments deleted, it is True again.
// Each change is seen within seconds (the time is logged); the Events say which image and why.
func (s *scenario) requiredImages(t *testing.T) {
	c := s.c
	ctx := context.Background()
	c.waitImagesReady(t, "True before", corev1.ConditionTrue, "AllPinned", "")

	// Before it is applied: holdfast check --cluster -f says the node lacks the image the manifest needs, and
	// holds the pause image it also names.
	manifest := filepath.Join(c.dir, "release.yaml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(releaseYAML, imgRequired, pauseImage)), 0o644); err != nil {
		t.Fatal(err)
	}
	s.waitCheckCluster(t, "-f before the archive", 1, []string{nodeName + "  " + imgRequired + "  missing", "1 lacking images (1 missing, 0 unpinned)"},
		[]string{pauseImage}, "-f", manifest)

	c.deployNeeding(t, "needs-archive", imgRequired)
	c.waitImagesReady(t, "False naming "+imgRequired, corev1.ConditionFalse, "ImagesMissing", imgRequired)
	s.waitRequiredMetric(t, "missing", 1)
	s.waitCheckCluster(t, "the node's own report", 1, []string{nodeName + "  " + imgRequired + "  missing", "Deployment default/needs-archive containers/c"}, nil)
	s.checkNodeImages(t)
	if err := c.waitNodeWarning("ImageMissing", imgRequired); err != nil {
		t.Error(err)
	}
	if err := writeStaticImage(filepath.Join(c.imagesDir, "required.tar"), imgRequired, filepath.Join(c.k8sBin, "pause"), "/pause",
		map[string]string{"holdfast.test": imgRequired}); err != nil {
		t.Fatal(err)
	}
	c.waitImagesReady(t, "True once the archive is in", corev1.ConditionTrue, "AllPinned", "")
	s.waitRequiredMetric(t, "missing", 0)
	s.waitCheckCluster(t, "once the archive is in", 0, []string{"1 nodes: 1 ready, 0 lacking images"}, []string{imgRequired})
	s.waitCheckCluster(t, "-f once the archive is in", 0, []string{"1 nodes: 1 ready"}, []string{imgRequired}, "-f", manifest)

	if err := c.importUnpinned(imgCollect); err != nil {
		t.Fatal(err)
	}
	c.deployNeeding(t, "needs-unpinned", imgCollect)
	c.waitImagesReady(t, "False, "+imgCollect+" unpinned", corev1.ConditionFalse, "ImagesUnpinned", imgCollect)
	if err := c.waitNodeWarning("ImageUnpinned", imgCollect); err != nil {
		t.Error(err)
	}
	// The kubelet's image GC removes an image through the CRI, as crictl rmi does.
	if out, err := c.crictl("rmi", imgCollect); err != nil {
		t.Fatalf("crictl rmi %s: %v\n%s", imgCollect, err, out)
	}
	c.waitImagesReady(t, "False, "+imgCollect+" collected", corev1.ConditionFalse, "ImagesMissing", imgCollect)
	s.waitCheckCluster(t, "once collected", 1, []string{nodeName + "  " + imgCollect + "  missing"}, nil)

	for _, name := range []string{"needs-archive", "needs-unpinned"} {
		if err := c.client.AppsV1().Deployments(workloadNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting Deployment %s: %v", name, err)
		}
	}
	c.waitImagesReady(t, "True once the Deployments are gone", corev1.ConditionTrue, "AllPinned", "")
}

// releaseYAML is a release as helm template renders it: a Deployment of the image no archive holds yet and a
// DaemonSet of the pause image, which the node holds pinned.
const releaseYAML = `---
# Source: shop/templates/api.yaml
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: shop}
spec:
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers: [{name: api, image: %q}]
---
# Source: shop/templates/agent.yaml
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: shop}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      nodeSelector: {kubernetes.io/os: linux}
      containers: [{name: agent, image: %q}]
`

// waitCheckCluster runs holdfast check --cluster (with the admin kubeconfig; no containerd) until it exits with
// code and prints every string of want and none of unwanted: the node's report follows its condition within a
// report interval. It fails the test with the last output after a minute.
func (s *scenario) waitCheckCluster(t *testing.T, what string, code int, want, unwanted []string, args ...string) {
	t.Helper()
	argv := append([]string{"check", "--cluster", "--kubeconfig", s.c.admin}, args...)
	start := time.Now()
	var out string
	var got int
	for time.Since(start) < time.Minute {
		cmd := exec.Command(filepath.Join(s.c.repoBin, "holdfast"), argv...)
		b, err := cmd.CombinedOutput()
		out, got = string(b), 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			got = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("holdfast %s: %v", strings.Join(argv, " "), err)
		}
		if got == code && !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(out, w) }) &&
			!slices.ContainsFunc(unwanted, func(w string) bool { return strings.Contains(out, w) }) {
			t.Logf("holdfast check --cluster %s: exit %d after %.1fs", what, got, time.Since(start).Seconds())
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("holdfast %s (%s): exit %d, want %d with %q and without %q:\n%s", strings.Join(argv, " "), what, got, code, want, unwanted, out)
}

// checkNodeImages: the node's NodeImages object is owned by its Node and says, packed, that the node holds the
// pause image pinned; its size is logged.
func (s *scenario) checkNodeImages(t *testing.T) {
	t.Helper()
	raw, err := s.c.client.CoreV1().RESTClient().Get().AbsPath(report.NodeImagesPath, nodeName).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("reading NodeImages %s: %v", nodeName, err)
	}
	var ni report.NodeImages
	if err := json.Unmarshal(raw, &ni); err != nil {
		t.Fatal(err)
	}
	held, err := report.Unpack(ni.Held)
	if err != nil {
		t.Fatal(err)
	}
	if len(ni.Metadata.OwnerReferences) != 1 || ni.Metadata.OwnerReferences[0].Kind != "Node" || ni.Metadata.OwnerReferences[0].Name != nodeName {
		t.Errorf("NodeImages owners %+v, want the Node", ni.Metadata.OwnerReferences)
	}
	if !slices.ContainsFunc(held, func(h report.HeldImage) bool { return h.Name == pauseImage && h.Pinned }) || ni.Images != len(held) || held.Hash() != ni.HeldHash {
		t.Errorf("NodeImages holds %d (%d listed, hash %s): %+v; want %s pinned among them", ni.Images, len(held), ni.HeldHash, held, pauseImage)
	}
	t.Logf("NodeImages %s: %d bytes for %d image records (%d pinned)", nodeName, len(raw), ni.Images, ni.Pinned)
}

// waitRequiredMetric waits for the agent's holdfast_required_images{state} to be want (read from the pod's
// /metrics, as Prometheus scrapes it).
func (s *scenario) waitRequiredMetric(t *testing.T, state string, want int) {
	t.Helper()
	pod := s.agentPod(t)
	u := "http://" + net.JoinHostPort(pod.Status.PodIP, "9747") + "/metrics"
	series := fmt.Sprintf("holdfast_required_images{state=%q} ", state)
	var got string
	if err := waitFor(series+"= "+fmt.Sprint(want), 30*time.Second, func() (bool, error) {
		resp, err := http.Get(u)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return false, err
		}
		got = "no such series"
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, series); ok {
				got = v
			}
		}
		return got == fmt.Sprint(want), fmt.Errorf("%s at %s: %s", series, u, got)
	}); err != nil {
		t.Fatal(err)
	}
}

// deployNeeding creates a Deployment with no replicas (needed tomorrow, not run today) whose one container runs
// image, deleted when the test ends.
func (c *cluster) deployNeeding(t *testing.T, name, image string) {
	t.Helper()
	zero := int32(0)
	d := deployment(name, image, &zero)
	ctx := context.Background()
	if _, err := c.client.AppsV1().Deployments(workloadNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Deployment %s: %v", name, err)
	}
	t.Cleanup(func() { _ = c.client.AppsV1().Deployments(workloadNS).Delete(ctx, name, metav1.DeleteOptions{}) })
}

// deployment is a Deployment of replicas pods, each one container running image, labelled app=name.
func deployment(name, image string, replicas *int32) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workloadNS},
		Spec: appsv1.DeploymentSpec{
			Replicas: replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}},
			},
		},
	}
}

// waitImagesReady waits for the node's HoldfastImagesReady condition to have status and reason and a message
// naming msgPart, and logs how long that took.
func (c *cluster) waitImagesReady(t *testing.T, what string, status corev1.ConditionStatus, reason, msgPart string) {
	t.Helper()
	start := time.Now()
	if err := waitFor("condition "+imagesReady+" "+what, 2*time.Minute, func() (bool, error) {
		return c.nodeCondition(imagesReady, status, reason, msgPart)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %s: %.1fs", imagesReady, what, time.Since(start).Seconds())
}

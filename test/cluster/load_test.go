package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/holdfast-project/holdfast/internal/report"
)

// Load of the reporter-under-load step: workloads, and distinct images the node does not hold (two a workload).
const (
	loadWorkloads = 1000
	loadImages    = 2 * loadWorkloads
	loadNS        = "holdfast-load"
)

// reporterUnderLoad: 1,000 Deployments (no replicas) naming 2,000 distinct images that the node does not hold
// turn HoldfastImagesReady False counting 2,000 missing, and the node's NodeImages counts them all and lists
// 1,000; deleting them turns the condition True again. The reporter's and the agent's CPU-seconds over the step
// and their peak RSS, the time to the condition, and the sizes of the Node and of NodeImages are logged.
func (s *scenario) reporterUnderLoad(t *testing.T) {
	c := s.c
	ctx := context.Background()
	reporter, agent := procOf(t, "holdfast-reporter"), procOf(t, "holdfast run")
	cpu0r, cpu0a := cpuSeconds(t, reporter), cpuSeconds(t, agent)
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: loadNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.client.CoreV1().Namespaces().Delete(context.Background(), loadNS, metav1.DeleteOptions{})
	})

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, loadWorkloads)
	names := make(chan int)
	for range 4 {
		wg.Go(func() {
			for i := range names {
				if _, err := c.client.AppsV1().Deployments(loadNS).Create(ctx, loadDeployment(i), metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range loadWorkloads {
		names <- i
	}
	close(names)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("creating the Deployments: %v", err)
	}
	created := time.Since(start)
	want := fmt.Sprintf("%d missing", loadImages)
	var firstFalse time.Duration
	last := ""
	if err := waitFor(imagesReady+" False counting "+want, 5*time.Minute, func() (bool, error) {
		ok, err := c.nodeCondition(imagesReady, corev1.ConditionFalse, "ImagesMissing", want)
		if firstFalse == 0 && err != nil && strings.Contains(err.Error(), "ImagesMissing") {
			firstFalse = time.Since(start)
		}
		if err != nil && err.Error() != last {
			last = err.Error()
			t.Logf("%.1fs: %s", time.Since(start).Seconds(), last[max(0, len(last)-60):])
		}
		return ok, err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d Deployments created in %.1fs; %s False %.1fs after the first, counting %s after %.1fs", loadWorkloads, created.Seconds(),
		imagesReady, firstFalse.Seconds(), want, time.Since(start).Seconds())
	var ni report.NodeImages
	var raw []byte
	if err := waitFor("NodeImages counting "+want, time.Minute, func() (bool, error) {
		var err error
		raw, err = c.client.CoreV1().RESTClient().Get().AbsPath(report.NodeImagesPath, nodeName).DoRaw(ctx)
		if err != nil {
			return false, err
		}
		if err := json.Unmarshal(raw, &ni); err != nil || ni.Required == nil {
			return false, fmt.Errorf("NodeImages %s: %v", raw[:min(len(raw), 200)], err)
		}
		return ni.Required.Counts["missing"] == loadImages, fmt.Errorf("NodeImages counts %v", ni.Required.Counts)
	}); err != nil {
		t.Fatal(err)
	}
	if len(ni.Required.NotReady) != report.MaxNotReady {
		t.Errorf("NodeImages lists %d images not ready, want %d (cut)", len(ni.Required.NotReady), report.MaxNotReady)
	}
	node, err := c.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeJSON, _ := json.Marshal(node)
	cond := ""
	for _, nc := range node.Status.Conditions {
		if string(nc.Type) == imagesReady {
			cond = nc.Message
		}
	}
	t.Logf("Node object %d bytes (condition message %d bytes); NodeImages %d bytes with %d not ready listed of %d",
		len(nodeJSON), len(cond), len(raw), len(ni.Required.NotReady), loadImages)

	for i := range loadWorkloads {
		if err := c.client.AppsV1().Deployments(loadNS).Delete(ctx, fmt.Sprintf("load-%04d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting: %v", err)
		}
	}
	if err := waitFor(imagesReady+" True again", 5*time.Minute, func() (bool, error) {
		return c.nodeCondition(imagesReady, corev1.ConditionTrue, "AllPinned", "")
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("reporter: %.2f CPU-seconds over the step (%.0fs), VmRSS %s, VmHWM %s", cpuSeconds(t, reporter)-cpu0r, time.Since(start).Seconds(),
		procStatus(t, reporter, "VmRSS"), procStatus(t, reporter, "VmHWM"))
	t.Logf("agent: %.2f CPU-seconds over the step, VmRSS %s, VmHWM %s", cpuSeconds(t, agent)-cpu0a,
		procStatus(t, agent, "VmRSS"), procStatus(t, agent, "VmHWM"))
}

func loadDeployment(i int) *appsv1.Deployment {
	zero := int32(0)
	name := fmt.Sprintf("load-%04d", i)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: loadNS},
		Spec: appsv1.DeploymentSpec{
			Replicas: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{
					{Name: "app", Image: fmt.Sprintf("holdfast.test/load/app-%04d:1.0", i)},
					{Name: "sidecar", Image: fmt.Sprintf("holdfast.test/load/sidecar-%04d:1.0", i)},
				}},
			},
		},
	}
}

// procOf finds the one process of the cluster's pods whose command line contains cmd.
func procOf(t *testing.T, cmd string) int {
	t.Helper()
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	found := 0
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})), cmd) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if pid == os.Getpid() || !inPod(pid) {
			continue
		}
		if found != 0 {
			t.Fatalf("two processes run %q: %d and %d", cmd, found, pid)
		}
		found = pid
	}
	if found == 0 {
		t.Fatalf("no process runs %q", cmd)
	}
	return found
}

// inPod says whether process pid runs in a pod of the cluster's kubelet (its
// cgroup is under kubepods), not beside it on the machine.
func inPod(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	return err == nil && strings.Contains(string(b), "kubepods")
}

// cpuSeconds is a process's user and system CPU time (USER_HZ 100, as on every Linux this runs on).
func cpuSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}

func procStatus(t *testing.T, pid int, key string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "?"
}

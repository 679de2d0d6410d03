package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestClusterUp: the node is Ready and a pod of the locally built pause image runs on it, as both the API and
// the node's CRI (crictl) report.
func TestClusterUp(t *testing.T) {
	c := needCluster(t)
	ctx := context.Background()
	if ok, err := c.nodeReady(); !ok {
		t.Fatalf("node not Ready: %v", err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pause-up", Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "pause", Image: pauseImage, ImagePullPolicy: corev1.PullNever,
			}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	created, err := c.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
	t.Cleanup(func() { c.deletePod(t, "default", pod.Name) })
	running := c.waitPodRunning(t, "default", created.Name, 2*time.Minute)
	if running.Spec.NodeName != nodeName {
		t.Errorf("pod %s runs on %q, want %s", pod.Name, running.Spec.NodeName, nodeName)
	}

	out, err := c.crictl("pods", "--name", pod.Name, "--namespace", "default", "--state", "ready", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var pods struct {
		Items []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &pods); err != nil {
		t.Fatalf("reading crictl pods output: %v\n%s", err, out)
	}
	if len(pods.Items) != 1 || pods.Items[0].State != "SANDBOX_READY" {
		t.Fatalf("crictl pods --name %s: want one ready sandbox, got %s", pod.Name, out)
	}
	out, err = c.crictl("ps", "--pod", pods.Items[0].ID, "--state", "running", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"CONTAINER_RUNNING"`) {
		t.Fatalf("crictl ps --pod %s: no running container:\n%s", pods.Items[0].ID, out)
	}
}

// waitPodRunning waits until the pod is Running with every container ready, and returns it.
func (c *cluster) waitPodRunning(t *testing.T, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := waitFor(fmt.Sprintf("pod %s/%s Running and ready", ns, name), timeout, func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p, err := c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		if p.Status.Phase != corev1.PodRunning {
			return false, fmt.Errorf("phase %s: %s", p.Status.Phase, podProblems(p))
		}
		for _, cs := range p.Status.ContainerStatuses {
			if !cs.Ready {
				return false, fmt.Errorf("container %s not ready: %s", cs.Name, podProblems(p))
			}
		}
		return true, nil
	}, c.procs["kubelet"], c.procs["containerd"])
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// podProblems summarises why a pod is not running: conditions and container waiting/terminated states.
func podProblems(p *corev1.Pod) string {
	var parts []string
	for _, cond := range p.Status.Conditions {
		if cond.Status != corev1.ConditionTrue {
			parts = append(parts, fmt.Sprintf("%s=%s %s %s", cond.Type, cond.Status, cond.Reason, cond.Message))
		}
	}
	for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil {
			parts = append(parts, fmt.Sprintf("%s waiting: %s %s", cs.Name, w.Reason, w.Message))
		}
		if term := cs.State.Terminated; term != nil {
			parts = append(parts, fmt.Sprintf("%s terminated: %s (exit %d) %s", cs.Name, term.Reason, term.ExitCode, term.Message))
		}
	}
	return strings.Join(parts, "; ")
}

// deletePod deletes a pod at once and waits until it is gone.
func (c *cluster) deletePod(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	err := c.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Errorf("deleting pod %s/%s: %v", ns, name, err)
		return
	}
	if err := waitFor("pod "+ns+"/"+name+" gone", time.Minute, func() (bool, error) {
		_, err := c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	}); err != nil {
		t.Error(err)
	}
}

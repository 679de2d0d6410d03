package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ownNodeOnly: with the credentials the agent's pod has (a service account
// token bound to the pod), patching its own Node's status and writing an
// Event about its Node are allowed; patching another Node's status, or an
// Event about another Node, or writing another node's NodeImages, is denied
// by the chart's admission policy.
func (s *scenario) ownNodeOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pod := s.agentPod(t)
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "holdfast-test-other-node"}}
	if _, err := s.c.client.CoreV1().Nodes().Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a second Node: %v", err)
	}
	t.Cleanup(func() {
		_ = s.c.client.CoreV1().Nodes().Delete(context.Background(), other.Name, metav1.DeleteOptions{})
	})
	exp := int64(600)
	tok, err := s.c.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp, BoundObjectRef: &authv1.BoundObjectReference{
			Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token bound to %s: %v", pod.Name, err)
	}
	cfg := rest.AnonymousClientConfig(s.c.restConfig)
	cfg.BearerToken = tok.Status.Token
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"status":{"conditions":[{"type":"HoldfastPolicyProbe","status":"True","reason":"Probe","message":"written by the test"}]}}`)
	// The policy may take a moment to be in force after the install.
	var ownErr error
	deadline := time.Now().Add(time.Minute)
	for {
		_, errOther := as.CoreV1().Nodes().Patch(ctx, other.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		if errOther != nil {
			if !strings.Contains(errOther.Error(), "may only write its own Node") {
				t.Fatalf("patching another Node's status was refused, but not by the policy: %v", errOther)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reporter's credentials patch another Node's (%s) status", other.Name)
		}
		time.Sleep(time.Second)
	}
	if _, ownErr = as.CoreV1().Nodes().Patch(ctx, pod.Spec.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); ownErr != nil {
		t.Errorf("patching its own Node's (%s) status: %v", pod.Spec.NodeName, ownErr)
	}
	event := func(node string) error {
		_, err := as.CoreV1().Events("default").Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: "holdfast-policy-probe."},
			InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node},
			Reason:         "Probe", Message: "written by the test", Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: "holdfast"},
		}, metav1.CreateOptions{})
		return err
	}
	if err := event(pod.Spec.NodeName); err != nil {
		t.Errorf("an Event about its own Node: %v", err)
	}
	if err := event(other.Name); err == nil || !strings.Contains(err.Error(), "may only write its own Node") {
		t.Errorf("an Event about another Node: %v, want it denied by the policy", err)
	}
	// Its node's NodeImages (the reporter writes it; the policy lets it), and
	// not another's.
	applyImages := func(node string) error {
		body := fmt.Sprintf(`{"apiVersion":"holdfast.io/v1alpha1","kind":"NodeImages","metadata":{"name":%q,"labels":{"holdfast-policy-probe":"true"}}}`, node)
		return as.CoreV1().RESTClient().Patch(types.ApplyPatchType).AbsPath("/apis/holdfast.io/v1alpha1/nodeimages", node).
			Param("fieldManager", "holdfast-policy-probe").Body([]byte(body)).Do(ctx).Error()
	}
	if err := applyImages(pod.Spec.NodeName); err != nil {
		t.Errorf("its own node's NodeImages: %v", err)
	}
	if err := applyImages(other.Name); err == nil || !strings.Contains(err.Error(), "may only write its own Node") {
		t.Errorf("another node's NodeImages: %v, want it denied by the policy", err)
	}
	// Leave the Node as the agent's reporter keeps it: the probe condition goes.
	n, err := s.c.client.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
	if err == nil {
		var kept []corev1.NodeCondition
		for _, c := range n.Status.Conditions {
			if c.Type != "HoldfastPolicyProbe" {
				kept = append(kept, c)
			}
		}
		n.Status.Conditions = kept
		_, _ = s.c.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	}
}

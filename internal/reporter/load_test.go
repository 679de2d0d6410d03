package reporter

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// loadWorkloads are 1,000 Deployments of 2 containers each, 2,000 distinct
// images in all, half of them pinned to the node's OS by affinity.
func loadWorkloads() []any {
	objs := make([]any, 0, 1000)
	for i := range 1000 {
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%d", i), Namespace: fmt.Sprintf("team-%d", i%40)},
			Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{
					{Name: "app", Image: fmt.Sprintf("registry.example.com/team-%d/app-%d:1.%d", i%40, i, i%7)},
					{Name: "sidecar", Image: fmt.Sprintf("registry.example.com/team-%d/proxy-%d@sha256:%064x", i%40, i, i)},
				},
			}}},
		}
		if i%2 == 0 {
			d.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}}},
				}}},
			}}
		}
		objs = append(objs, d)
	}
	return objs
}

// BenchmarkRequiredSet is what the reporter computes after a change (a
// second's changes together) on a cluster of 1,000 workloads and 2,000
// distinct images; it reports the size of the PUT /required body.
func BenchmarkRequiredSet(b *testing.B) {
	objs := loadWorkloads()
	labels := map[string]string{"kubernetes.io/os": "linux", "kubernetes.io/hostname": "node-1"}
	log := slog.New(slog.DiscardHandler)
	var body []byte
	for b.Loop() {
		set := requiredSet(objs, "node-1", labels, log)
		if len(set.Images) != 2000 {
			b.Fatalf("%d images, want 2000", len(set.Images))
		}
		body, _ = json.Marshal(set)
	}
	b.ReportMetric(float64(len(body)), "body-bytes")
}

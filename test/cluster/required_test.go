package cluster

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Images of the required-images step.
const (
	imgRequired = "holdfast.test/required:1" // a Deployment needs it; no archive holds it until the step drops one
	imgCollect  = "holdfast.test/collect:1"  // a Deployment needs it; imported unpinned, then removed as image GC does
	required    = "HoldfastImagesReady"
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
	waitCond := func(what string, status corev1.ConditionStatus, reason, msgPart string) time.Duration {
		t.Helper()
		start := time.Now()
		if err := waitFor("condition "+required+" "+what, 2*time.Minute, func() (bool, error) {
			return c.nodeCondition(required, status, reason, msgPart)
		}); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		t.Logf("%s %s: %.1fs", required, what, took.Seconds())
		return took
	}
	waitCond("True before", corev1.ConditionTrue, "AllPinned", "")

	deploy := func(name, image string) {
		t.Helper()
		zero := int32(0)
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workloadNS},
			Spec: appsv1.DeploymentSpec{
				Replicas: &zero, // needed tomorrow, not run today
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}},
				},
			},
		}
		if _, err := c.client.AppsV1().Deployments(workloadNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating Deployment %s: %v", name, err)
		}
		t.Cleanup(func() { _ = c.client.AppsV1().Deployments(workloadNS).Delete(ctx, name, metav1.DeleteOptions{}) })
	}

	deploy("needs-archive", imgRequired)
	waitCond("False naming "+imgRequired, corev1.ConditionFalse, "ImagesMissing", imgRequired)
	if err := c.waitNodeWarning("ImageMissing", imgRequired); err != nil {
		t.Error(err)
	}
	if err := writeStaticImage(filepath.Join(c.imagesDir, "required.tar"), imgRequired, filepath.Join(c.k8sBin, "pause"), "/pause",
		map[string]string{"holdfast.test": imgRequired}); err != nil {
		t.Fatal(err)
	}
	waitCond("True once the archive is in", corev1.ConditionTrue, "AllPinned", "")

	if err := c.importUnpinned(imgCollect); err != nil {
		t.Fatal(err)
	}
	deploy("needs-unpinned", imgCollect)
	waitCond("False, "+imgCollect+" unpinned", corev1.ConditionFalse, "ImagesUnpinned", imgCollect)
	if err := c.waitNodeWarning("ImageUnpinned", imgCollect); err != nil {
		t.Error(err)
	}
	// The kubelet's image GC removes an image through the CRI, as crictl rmi does.
	if out, err := c.crictl("rmi", imgCollect); err != nil {
		t.Fatalf("crictl rmi %s: %v\n%s", imgCollect, err, out)
	}
	waitCond("False, "+imgCollect+" collected", corev1.ConditionFalse, "ImagesMissing", imgCollect)

	for _, name := range []string{"needs-archive", "needs-unpinned"} {
		if err := c.client.AppsV1().Deployments(workloadNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting Deployment %s: %v", name, err)
		}
	}
	waitCond("True once the Deployments are gone", corev1.ConditionTrue, "AllPinned", "")
}

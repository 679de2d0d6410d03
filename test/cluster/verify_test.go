package cluster

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// TestKubeletVerifiesPreloaded: what holdfast check warns of is what the
// kubelet does. Two images are imported (not pulled by the kubelet) under a
// registry no one answers. With imagePullCredentialsVerificationPolicy
// AlwaysVerify the kubelet pulls them for IfNotPresent containers and image
// volumes, pull secrets or not (ErrImagePull), and refuses a Never container
// (ErrImageNeverPull); holdfast check with that configuration warns of both
// images and of no other. With the images allowlisted under
// NeverVerifyAllowlistedImages, the same pods run, and check warns of none.
func TestKubeletVerifiesPreloaded(t *testing.T) {
	c := needCluster(t)
	const img, vol = "registry.invalid/holdfast/verify:1", "registry.invalid/holdfast/volume:1"
	for _, ref := range []string{img, vol} {
		if err := c.importUnpinned(ref); err != nil {
			t.Fatal(err)
		}
	}
	pods := map[string]corev1.PodSpec{
		"if-not-present": {Containers: []corev1.Container{{Name: "c", Image: img, ImagePullPolicy: corev1.PullIfNotPresent}}},
		"never":          {Containers: []corev1.Container{{Name: "c", Image: img, ImagePullPolicy: corev1.PullNever}}},
		"pull-secret": {Containers: []corev1.Container{{Name: "c", Image: img, ImagePullPolicy: corev1.PullIfNotPresent}},
			ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}}},
		"image-volume": {Containers: []corev1.Container{{Name: "c", Image: img, ImagePullPolicy: corev1.PullNever}},
			Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: vol, PullPolicy: corev1.PullIfNotPresent}}}}},
	}
	// The pods as manifests for holdfast check.
	var docs []string
	for name, spec := range pods {
		b, err := yaml.Marshal(corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workloadNS}, Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	manifests := filepath.Join(c.dir, "verify-pods.yaml")
	if err := os.WriteFile(manifests, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.restartKubelet(c.defaultKubeletConfig()); err != nil {
			t.Errorf("restoring the kubelet: %v", err)
		}
	})

	// waiting says, pod by pod, the reason its container waits for, or
	// "running", once every pod has one that is not ContainerCreating.
	ctx := context.Background()
	states := func(prefix string) map[string]string {
		t.Helper()
		out := map[string]string{}
		err := waitFor("the "+prefix+" pods to start or fail", 2*time.Minute, func() (bool, error) {
			for name := range pods {
				p, err := c.client.CoreV1().Pods(workloadNS).Get(ctx, prefix+name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				out[name] = ""
				for _, cs := range p.Status.ContainerStatuses {
					switch {
					case cs.State.Running != nil:
						out[name] = "running"
					case cs.State.Waiting != nil && cs.State.Waiting.Reason != "ContainerCreating":
						out[name] = cs.State.Waiting.Reason
					}
				}
				if out[name] == "" {
					return false, nil
				}
			}
			return true, nil
		}, c.procs["kubelet"])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	try := func(prefix string, cfg map[string]any) (map[string]string, []string) {
		t.Helper()
		if err := c.restartKubelet(cfg); err != nil {
			t.Fatal(err)
		}
		for name, spec := range pods {
			spec.NodeName = nodeName
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: prefix + name, Namespace: workloadNS}, Spec: spec}
			if _, err := c.client.CoreV1().Pods(workloadNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				zero := int64(0)
				_ = c.client.CoreV1().Pods(workloadNS).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			})
		}
		got := states(prefix)
		file := filepath.Join(c.dir, prefix+"kubelet-config.json")
		b, _ := json.Marshal(cfg)
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := c.holdfast("check", "-o", "json", "--no-sandbox-image", "--allow-unpinned", "--kubelet-config", file, manifests)
		if err != nil {
			t.Fatalf("holdfast check: %v", err)
		}
		var report struct {
			Images []struct {
				Ref        string `json:"ref"`
				ForcedPull *struct {
					Policy string `json:"policy"`
				} `json:"forcedPull"`
			} `json:"images"`
		}
		if err := json.Unmarshal([]byte(out), &report); err != nil {
			t.Fatalf("holdfast check -o json: %v: %s", err, out)
		}
		var warned []string
		for _, i := range report.Images {
			if i.ForcedPull != nil {
				warned = append(warned, i.Ref+" "+i.ForcedPull.Policy)
			}
		}
		slices.Sort(warned)
		return got, warned
	}

	cfg := c.defaultKubeletConfig()
	cfg["imagePullCredentialsVerificationPolicy"] = "AlwaysVerify"
	got, warned := try("always-", cfg)
	// The image volume's pod: its container (Never) is refused, and the
	// kubelet tried to pull the volume's image (an Event says so).
	want := map[string]string{"if-not-present": "ImagePull", "never": "ErrImageNeverPull", "pull-secret": "ImagePull", "image-volume": "ErrImageNeverPull"}
	for name, reason := range want {
		// ErrImagePull, then ImagePullBackOff.
		if !strings.Contains(got[name], reason) {
			t.Errorf("AlwaysVerify: pod %s: %q, want %s", name, got[name], reason)
		}
	}
	if err := waitFor("an Event of the kubelet pulling "+vol, time.Minute, func() (bool, error) {
		evs, err := c.client.CoreV1().Events(workloadNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=always-image-volume"})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(evs.Items, func(e corev1.Event) bool {
			return e.Reason == "Pulling" && strings.Contains(e.Message, vol)
		}), nil
	}); err != nil {
		t.Error(err)
	}
	if w := []string{img + " AlwaysVerify", vol + " AlwaysVerify"}; !slices.Equal(warned, w) {
		t.Errorf("AlwaysVerify: check warned of %q, want %q", warned, w)
	}

	cfg = c.defaultKubeletConfig()
	cfg["imagePullCredentialsVerificationPolicy"] = "NeverVerifyAllowlistedImages"
	cfg["preloadedImagesVerificationAllowlist"] = []string{"registry.invalid/holdfast/*"}
	got, warned = try("allowed-", cfg)
	for name := range pods {
		if got[name] != "running" {
			t.Errorf("allowlisted: pod %s: %q, want running", name, got[name])
		}
	}
	if len(warned) != 0 {
		t.Errorf("allowlisted: check warned of %q", warned)
	}
}

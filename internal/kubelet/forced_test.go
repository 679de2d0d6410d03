package kubelet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/workload"
)

const forcedManifests = `apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: shop}
spec:
  template:
    spec:
      containers:
        - {name: api, image: "registry.example.com/shop/api:2.0"}
        - {name: proxy, image: "nginx:1.27", imagePullPolicy: IfNotPresent}
        - {name: always, image: "registry.example.com/shop/sidecar:1", imagePullPolicy: Always}
      volumes:
        - {name: data, image: {reference: "registry.example.com/shop/data:3", pullPolicy: Never}}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: report, namespace: shop}
spec:
  schedule: "0 * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          containers: [{name: r, image: "registry.example.com/shop/api:2.0", imagePullPolicy: Never}]
`

const alwaysVerify = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
imagePullCredentialsVerificationPolicy: AlwaysVerify
`

const allowlisted = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages
preloadedImagesVerificationAllowlist:
  - registry.example.com/shop/*
  - docker.io/library/nginx
`

// forcedPulls is what c says of each image of forcedManifests.
func forcedPulls(t *testing.T, c *Config) map[string]*report.ForcedPull {
	t.Helper()
	var set workload.Set
	set.Read("shop.yaml", []byte(forcedManifests))
	if len(set.Errors) > 0 {
		t.Fatal(set.Errors)
	}
	out := map[string]*report.ForcedPull{}
	for _, img := range set.Images() {
		out[img.Ref] = c.ForcedPull(img)
	}
	return out
}

func writeConfig(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestForcedPull: with AlwaysVerify, every image that a container or image
// volume uses with IfNotPresent or Never is one the kubelet would pull
// again (or refuse): the policy, the file, the uses and the fix, in one
// message; Always pulls anyway. NeverVerifyAllowlistedImages exempts what
// its allowlist names, as the pods write the names. No configuration says
// nothing.
func TestForcedPull(t *testing.T) {
	always := writeConfig(t, "config.yaml", alwaysVerify)
	c, err := Load([]string{always})
	if err != nil {
		t.Fatal(err)
	}
	forced := forcedPulls(t, c)
	api := forced["registry.example.com/shop/api:2.0"]
	if api == nil || api.Policy != "AlwaysVerify" || api.From != always || strings.Join(api.PullPolicies, ",") != "IfNotPresent,Never" ||
		len(api.UsedBy) != 2 || strings.Join(api.Allowlist, ",") != "registry.example.com/shop/api" {
		t.Fatalf("api: %+v", api)
	}
	want := "registry.example.com/shop/api:2.0: the kubelet would pull it although this node holds it (imagePullPolicy IfNotPresent), which fails where no registry answers, or refuse to start it (Never: ErrImageNeverPull): imagePullCredentialsVerificationPolicy AlwaysVerify in " +
		always + " has it verify the pull credentials of every image it did not pull itself, as it did not pull what holdfast imports (used by shop.yaml#1 Deployment shop/api containers/api and 1 more); add registry.example.com/shop/api to preloadedImagesVerificationAllowlist with NeverVerifyAllowlistedImages, or set NeverVerifyPreloadedImages"
	if api.Message != want {
		t.Errorf("message:\n%s\nwant:\n%s", api.Message, want)
	}
	if n := forced["docker.io/library/nginx:1.27"]; n == nil || strings.Join(n.Allowlist, ",") != "nginx" || !strings.Contains(n.Message, "(imagePullPolicy IfNotPresent), which fails where no registry answers:") {
		t.Errorf("nginx: %+v, want the allowlist name as the pod writes it", n)
	}
	if d := forced["registry.example.com/shop/data:3"]; d == nil || !strings.Contains(d.Message, "refuse to start it") || !strings.Contains(d.Message, "volumes/data") {
		t.Errorf("the image volume: %+v", d)
	}
	if s := forced["registry.example.com/shop/sidecar:1"]; s != nil {
		t.Errorf("imagePullPolicy Always pulls anyway, whatever the verification: %+v", s)
	}

	c, err = Load([]string{always, writeConfig(t, "50-allow.conf", allowlisted)})
	if err != nil {
		t.Fatal(err)
	}
	var warned []string
	for ref, f := range forcedPulls(t, c) {
		if f != nil {
			warned = append(warned, ref)
			if f.Policy != "NeverVerifyAllowlistedImages" || !strings.Contains(f.Message, "preloadedImagesVerificationAllowlist names them, and it names no nginx") {
				t.Errorf("%s: %+v", ref, f)
			}
		}
	}
	if strings.Join(warned, ",") != "docker.io/library/nginx:1.27" {
		t.Errorf("warned of %q, want nginx alone (the pod names it nginx, not docker.io/library/nginx)", warned)
	}

	var none *Config
	if f := forcedPulls(t, none)["registry.example.com/shop/api:2.0"]; f != nil {
		t.Errorf("no kubelet configuration: %+v", f)
	}
}

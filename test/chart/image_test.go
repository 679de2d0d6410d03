package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// imageValues: every container of holdfast's image rendered (holdfast, the
// reporter, spegel), with the image values given.
func imageValues(image map[string]any) map[string]any {
	v := peerValues(nil)
	v["reporter"] = map[string]any{"enabled": true}
	v["image"] = image
	return v
}

// podContainers is every container and init container of the DaemonSet, by name.
func podContainers(t *testing.T, r rendered) map[string]corev1.Container {
	t.Helper()
	spec := r.daemonSet(t).Spec.Template.Spec
	cs := map[string]corev1.Container{}
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		cs[c.Name] = c
	}
	for _, want := range []string{"holdfast", "reporter", "spegel"} {
		if _, ok := cs[want]; !ok {
			t.Fatalf("no container %s rendered; containers: %v", want, cs)
		}
	}
	return cs
}

func appVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir(t), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil || c.AppVersion == "" {
		t.Fatalf("Chart.yaml: appVersion %q: %v", c.AppVersion, err)
	}
	return c.AppVersion
}

// TestImageDigest: with image.digest set every container runs
// repository@digest, whatever the tag; without it repository:tag, the tag by
// default the chart's appVersion.
func TestImageDigest(t *testing.T) {
	t.Parallel()
	repo := "registry.example/holdfast"
	for _, tc := range []struct {
		name  string
		image map[string]any
		want  string
	}{
		{"digest", map[string]any{"repository": repo, "digest": testDigest}, repo + "@" + testDigest},
		{"digest and tag", map[string]any{"repository": repo, "tag": "v9.9.9", "digest": testDigest}, repo + "@" + testDigest},
		{"tag", map[string]any{"repository": repo, "tag": "v9.9.9"}, repo + ":v9.9.9"},
		{"neither", map[string]any{"repository": repo, "digest": ""}, repo + ":" + appVersion(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for name, c := range podContainers(t, render(t, imageValues(tc.image))) {
				if c.Image != tc.want {
					t.Errorf("container %s: image %q, want %q", name, c.Image, tc.want)
				}
			}
		})
	}
}

// TestImageDigestMalformed: a digest that is not sha256: and 64 lowercase hex
// digits fails the render, naming the value.
func TestImageDigestMalformed(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", // no algorithm
		"sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
		"sha256:0123456789abcdef",
		"sha512:" + strings.Repeat("0", 64),
		testDigest + "\n",
		"v1.0.0",
	} {
		_, err := helm(t, "template", release, chartDir(t), "-f", valuesFile(t, imageValues(map[string]any{"digest": bad})))
		if err == nil || !strings.Contains(err.Error(), "image.digest") || !strings.Contains(err.Error(), "want sha256: and 64 lowercase hex digits") {
			t.Errorf("helm template with image.digest %q: %v, want an error naming image.digest and its form", bad, err)
		}
	}
}

package e2e

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckSandboxImageOnLines: holdfast check checks the pod sandbox (pause)
// image the CRI says it runs pods with, beside the workloads' images. The
// CRI of containerd 1.x reports it (its default here: 1.6.20 pause:3.6,
// 1.7.35 pause:3.8), and check names it missing on a node without it; the
// CRI of 2.x does not (it keeps it in its images plugin's config), and check
// says so and checks the workloads alone.
func TestCheckSandboxImageOnLines(t *testing.T) {
	reported := map[string]string{
		"debian-1.6":     "registry.k8s.io/pause:3.6",
		"containerd-1.7": "registry.k8s.io/pause:3.8",
	}
	forEachLine(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		manifest := filepath.Join(dir, "pod.yaml")
		pod := "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, image: e2e.local/sandbox/app:1}]\n"
		if err := os.WriteFile(manifest, []byte(pod), 0o644); err != nil {
			t.Fatal(err)
		}
		r, res := d.check(t, filepath.Join(dir, "data"), manifest)
		want := reported[d.Name]
		if r.Sandbox != want {
			t.Errorf("sandbox image %q, want %q\n%s", r.Sandbox, want, res.Stderr)
		}
		states := map[string]string{}
		for _, img := range r.Images {
			states[img.Ref] = img.State
		}
		wantStates := map[string]string{"e2e.local/sandbox/app:1": "missing"}
		if want != "" {
			wantStates[want] = "missing"
		}
		if !maps.Equal(states, wantStates) {
			t.Errorf("check's images %v, want %v", states, wantStates)
		}
		warned := strings.Contains(res.Stderr, "does not say which sandbox (pause) image")
		if warned != (want == "") {
			t.Errorf("warning about the sandbox image shown %v, want %v\n%s", warned, want == "", res.Stderr)
		}
		if res.Code != 1 {
			t.Errorf("check exited %d, want 1 (missing images)", res.Code)
		}
	})
}

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// checkReport is what holdfast check -o json says.
type checkReport struct {
	Images []struct {
		Ref    string   `json:"ref"`
		State  string   `json:"state"`
		UsedBy []string `json:"usedBy"`
	} `json:"images"`
	Sandbox string   `json:"sandbox"`
	Errors  []string `json:"errors"`
}

func (d *daemon) check(t *testing.T, dataDir string, args ...string) (checkReport, result) {
	t.Helper()
	res := holdfast(t, append([]string{"check", "-o", "json", "--address", d.Address, "--data-dir", dataDir}, args...)...)
	var r checkReport
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil {
		t.Fatalf("check -o json (exit %d): %v\n%s\n%s", res.Code, err, res.Stdout, res.Stderr)
	}
	return r, res
}

// TestCheck: helm template of a chart whose four images are half on the
// node: one imported and pinned, one recorded but not pinned, two missing.
// holdfast check names exactly the unpinned and the missing ones and exits
// 1; --allow-unpinned still exits 1 for the missing; once an archive of the
// missing and the unpinned is imported, it exits 0. A broken document is
// named, the others checked, exit 2. On containerd 1.x the CRI's sandbox
// image is checked too.
func TestCheck(t *testing.T) {
	helm, err := exec.LookPath("helm")
	if err != nil {
		t.Fatalf("helm is not on PATH (make deps builds it into bin/): %v", err)
	}
	dir := tempDir(t)
	chart := filepath.Join(dir, "shop")
	names := []string{"e2e.local/check/web:1", "e2e.local/check/api:2", "e2e.local/check/worker:3", "e2e.local/check/cron:4"}
	files := map[string]string{
		"Chart.yaml": "apiVersion: v2\nname: shop\nversion: 0.1.0\n",
		"templates/workloads.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      initContainers: [{name: init, image: "` + names[1] + `"}]
      containers: [{name: web, image: "` + names[0] + `"}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: worker}
spec:
  selector: {matchLabels: {app: worker}}
  serviceName: worker
  template:
    metadata: {labels: {app: worker}}
    spec: {containers: [{name: w, image: "` + names[2] + `"}]}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
spec:
  schedule: "0 3 * * *"
  jobTemplate: {spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: "` + names[3] + `"}]}}}}
`,
	}
	for name, body := range files {
		p := filepath.Join(chart, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(helm, "template", "shop", chart).Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	rendered := filepath.Join(dir, "rendered.yaml")
	if err := os.WriteFile(rendered, out, 0o644); err != nil {
		t.Fatal(err)
	}
	imgs := map[string]*fixture.Image{}
	for _, n := range names {
		imgs[n] = build(t, fixture.ImageSpec{Names: []string{n}})
	}

	forEachDaemon(t, func(t *testing.T, d *daemon) {
		base := tempDir(t)
		imagesDir, dataDir := filepath.Join(base, "images"), filepath.Join(base, "data")
		// web pinned by an import; api recorded, not pinned.
		writeDockerSave(t, filepath.Join(imagesDir, "web.tar"), imgs[names[0]])
		if res := d.sync(t, dataDir, imagesDir); res.Code != 0 {
			t.Fatalf("sync exited %d\n%s", res.Code, res.Stderr)
		}
		keepCtrImport(t, d, imgs[names[1]]) // a record, no pin
		r, res := d.check(t, dataDir, "--no-sandbox-image", rendered)
		if res.Code != 1 {
			t.Fatalf("check exited %d, want 1\n%s\n%s", res.Code, res.Stdout, res.Stderr)
		}
		got := map[string]string{}
		for _, img := range r.Images {
			got[img.Ref] = img.State
			if len(img.UsedBy) == 0 || !strings.HasPrefix(img.UsedBy[0], rendered+"#") {
				t.Errorf("%s used by %q", img.Ref, img.UsedBy)
			}
		}
		want := map[string]string{names[0]: "pinned", names[1]: "present", names[2]: "missing", names[3]: "missing"}
		if len(got) != len(want) {
			t.Errorf("check lists %v, want %v", got, want)
		}
		for n, st := range want {
			if got[n] != st {
				t.Errorf("%s: %q, want %s", n, got[n], st)
			}
		}
		if _, res := d.check(t, dataDir, "--no-sandbox-image", "--allow-unpinned", rendered); res.Code != 1 {
			t.Errorf("check --allow-unpinned with two missing exited %d, want 1", res.Code)
		}

		// Carried across: the missing two and the unpinned one.
		writeDockerSave(t, filepath.Join(imagesDir, "rest.tar"), imgs[names[1]], imgs[names[2]], imgs[names[3]])
		if res := d.sync(t, dataDir, imagesDir); res.Code != 0 {
			t.Fatalf("sync exited %d\n%s", res.Code, res.Stderr)
		}
		if r, res := d.check(t, dataDir, "--no-sandbox-image", rendered); res.Code != 0 {
			t.Errorf("check after the import exited %d, want 0: %+v", res.Code, r.Images)
		}

		// A broken document among good ones: named, the rest checked.
		broken := filepath.Join(base, "broken.yaml")
		if err := os.WriteFile(broken, append([]byte("kind: Pod\nspec: {containers: [\n---\n"), out...), 0o644); err != nil {
			t.Fatal(err)
		}
		r, res = d.check(t, dataDir, "--no-sandbox-image", broken)
		if res.Code != 2 || len(r.Images) != 4 || len(r.Errors) != 1 || !strings.HasPrefix(r.Errors[0], broken+":1: document 1:") {
			t.Errorf("check of a broken document: exit %d, %d images, errors %q", res.Code, len(r.Images), r.Errors)
		}

		// The sandbox image: containerd 1.x's CRI reports it, and it is
		// checked beside the workloads' images.
		r, _ = d.check(t, dataDir, rendered)
		if d.Name == "debian-1.6" && (r.Sandbox == "" || len(r.Images) != 5) {
			t.Errorf("containerd 1.6: sandbox image %q, %d images checked, want it and the 4", r.Sandbox, len(r.Images))
		}
	})
}

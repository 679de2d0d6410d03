package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/images"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// checkReport is what holdfast check -o json says.
type checkReport struct {
	Images []struct {
		Ref    string   `json:"ref"`
		State  string   `json:"state"`
		UsedBy []string `json:"usedBy"`
	} `json:"images"`
	Sandbox       string `json:"sandbox"`
	SharedDigests []struct {
		Image   string   `json:"image"`
		Held    []string `json:"held"`
		UsedBy  []string `json:"usedBy"`
		Message string   `json:"message"`
	} `json:"sharedDigests"`
	Errors []string `json:"errors"`
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

// TestCheckSharedDigest: holdfast holds an image as e2e.local/shared/web:1;
// a Deployment with imagePullSecrets asks for the same digest as
// mirror.e2e.local/shared/web@<digest> (no record: the kubelet would pull
// it) and, with imagePullPolicy Always, as e2e.local/mirror/web:1 (a record
// not holdfast's), and for the held name itself. With the kubelet's default
// policy (NeverVerifyPreloadedImages) check warns of the first two, naming
// the workload, the name asked for, the held names and the fix, and exits 1
// for the missing one only; --allow-unpinned without it exits 0, warnings
// and all. With NeverVerify it says nothing of them.
func TestCheckSharedDigest(t *testing.T) {
	img := build(t, fixture.ImageSpec{Names: []string{"e2e.local/shared/web:1"}})
	dg := img.Target.Digest.String()
	byDigest, tagged := "mirror.e2e.local/shared/web@"+dg, "e2e.local/mirror/web:1"
	deployment := `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  template:
    spec:
      imagePullSecrets: [{name: regcred}]
      containers:
        - {name: held, image: "e2e.local/shared/web:1"}
        - {name: tagged, image: "` + tagged + `", imagePullPolicy: Always}
`
	dir := tempDir(t)
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	present := write("present.yaml", deployment)
	all := write("all.yaml", deployment+"        - {name: mirror, image: \""+byDigest+"\"}\n")
	kubeletConf := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	defaults := write("defaults.yaml", kubeletConf)
	never := write("never.yaml", kubeletConf+"imagePullCredentialsVerificationPolicy: NeverVerify\n")

	forEachDaemon(t, func(t *testing.T, d *daemon) {
		base := tempDir(t)
		imagesDir, dataDir := filepath.Join(base, "images"), filepath.Join(base, "data")
		writeDockerSave(t, filepath.Join(imagesDir, "web.tar"), img)
		if res := d.sync(t, dataDir, imagesDir); res.Code != 0 {
			t.Fatalf("sync exited %d\n%s", res.Code, res.Stderr)
		}
		// A record of the same target that holdfast does not hold, as a
		// pull by the kubelet leaves one.
		if _, err := d.Client.ImageService().Create(d.ctx(), images.Image{Name: tagged, Target: img.Target}); err != nil {
			t.Fatal(err)
		}

		r, res := d.check(t, dataDir, "--no-sandbox-image", "--kubelet-config", defaults, all)
		if res.Code != 1 {
			t.Errorf("check exited %d, want 1 (%s is missing)\n%s", res.Code, byDigest, res.Stderr)
		}
		warned := map[string]string{}
		for _, s := range r.SharedDigests {
			warned[s.Image] = s.Message
			if !slices.Contains(s.Held, "e2e.local/shared/web:1") || len(s.UsedBy) != 1 || !strings.HasPrefix(s.UsedBy[0], all+"#1 Deployment shop/web containers/") {
				t.Errorf("%s: held %q, used by %q", s.Image, s.Held, s.UsedBy)
			}
		}
		if len(warned) != 2 || warned[byDigest] == "" || warned[tagged] == "" {
			t.Fatalf("check warned of %d shared digests %v, want %s and %s\n%s", len(r.SharedDigests), warned, byDigest, tagged, res.Stderr)
		}
		for _, want := range []string{
			"warning: " + byDigest + " (used by " + all + "#1 Deployment shop/web containers/mirror, with imagePullSecrets regcred): this node holds its digest " + dg[7:19] + " only as e2e.local/shared/web:1",
			"once the kubelet pulls " + byDigest + " it records that image as pulled by itself, and imagePullCredentialsVerificationPolicy NeverVerifyPreloadedImages (the kubelet's default) then has it verify",
			"(imagePullPolicy Never: ErrImageNeverPull)",
			"name the image " + byDigest + " in the archive or pin list",
			"or add e2e.local/shared/web to preloadedImagesVerificationAllowlist with NeverVerifyAllowlistedImages\n",
			"warning: " + tagged + " (used by " + all + "#1 Deployment shop/web containers/tagged, with imagePullSecrets regcred)",
		} {
			if !strings.Contains(res.Stderr, want) {
				t.Errorf("check's warnings lack %q:\n%s", want, res.Stderr)
			}
		}

		r, res = d.check(t, dataDir, "--no-sandbox-image", "--allow-unpinned", "--kubelet-config", defaults, present)
		if res.Code != 0 || len(r.SharedDigests) != 1 || r.SharedDigests[0].Image != tagged || !strings.Contains(res.Stderr, "warning: "+tagged+" (used by") {
			t.Errorf("check --allow-unpinned of present images: exit %d, want 0 with a warning of %s: %+v\n%s", res.Code, tagged, r.SharedDigests, res.Stderr)
		}

		r, res = d.check(t, dataDir, "--no-sandbox-image", "--kubelet-config", never, all)
		if res.Code != 1 || len(r.SharedDigests) != 0 || strings.Contains(res.Stderr, "warning:") {
			t.Errorf("check with NeverVerify: exit %d, want 1 and no warning: %+v\n%s", res.Code, r.SharedDigests, res.Stderr)
		}
	})
}

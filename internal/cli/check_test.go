package cli

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/spf13/cobra"

	"github.com/holdfast-project/holdfast/internal/kubelet"
	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// checkRun is one holdfast check of files against records: its JSON
// report, its standard error and its exit status.
type checkRun struct {
	report CheckReport
	stderr string
	code   int
}

func runCheck(t *testing.T, records []runtime.Image, files ...string) checkRun {
	t.Helper()
	return runCheckKubelet(t, records, nil, files...)
}

// runCheckKubelet is runCheck with --kubelet-config kubeletConfig (nil:
// none, not the machine's).
func runCheckKubelet(t *testing.T, records []runtime.Image, kubeletConfig []string, files ...string) checkRun {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	o := &options{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	set := readSet(cmd, o, files)
	var kc *kubelet.Config
	if kubeletConfig != nil {
		kc = readKubelet(o, kubeletConfig, set)
	}
	err := checkNode(cmd, set, records, "", kc, "json", false)
	var r checkRun
	r.code, r.stderr = ExitCode(err), errOut.String()
	if err := json.Unmarshal(out.Bytes(), &r.report); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	return r
}

func pinnedRecord(name string) runtime.Image {
	return runtime.Image{Name: name, Target: ocispec.Descriptor{Digest: digest.FromString(name)},
		Labels: map[string]string{runtime.LabelCRIPinned: runtime.PinnedValue}}
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const checkTwoDeployments = `apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: shop}
spec:
  template:
    spec:
      containers: [{name: api, image: "registry.example.com/shop/api:2.0"}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: worker, namespace: shop}
spec:
  template:
    spec:
      containers: [{name: w, image: "registry.example.com/shop/worker:2.0"}]
`

const checkJSONStream = `{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api", "namespace": "shop"},
 "spec": {"template": {"spec": {"containers": [{"name": "api", "image": "registry.example.com/shop/api:2.0"}]}}}}
{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "worker", "namespace": "shop"},
 "spec": {"template": {"spec": {"containers": [{"name": "w", "image": "registry.example.com/shop/worker:2.0"}]}}}}
`

func utf16File(s string, order binary.AppendByteOrder) []byte {
	out := order.AppendUint16(nil, 0xfeff)
	for _, u := range utf16.Encode([]rune(s)) {
		out = order.AppendUint16(out, u)
	}
	return out
}

// TestCheckReadsEveryDocument: the node holds the first Deployment's image
// pinned, not the second's; however the manifests were written (Windows
// line ends, a stream of JSON objects, PowerShell's UTF-16 in either byte
// order, a tagged document start), check finds the second one missing and
// does not say ready.
func TestCheckReadsEveryDocument(t *testing.T) {
	records := []runtime.Image{pinnedRecord("registry.example.com/shop/api:2.0")}
	crlf := strings.ReplaceAll(checkTwoDeployments, "\n", "\r\n")
	for _, tc := range []struct {
		name string
		data []byte
		code int
	}{
		{"crlf.yaml", []byte(crlf), 1},
		{"stream.json", []byte(checkJSONStream), 1},
		{"utf16le.yaml", utf16File(crlf, binary.LittleEndian), 1},
		{"utf16be.yaml", utf16File(checkTwoDeployments, binary.BigEndian), 1},
		// kubectl refuses it: named, and exit 2.
		{"tagged.yaml", []byte(strings.Replace(checkTwoDeployments, "---\n", "--- !!map\n", 1)), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCheck(t, records, writeFile(t, tc.name, tc.data))
			states := map[string]string{}
			for _, img := range r.report.Images {
				states[img.Ref] = string(img.State)
			}
			if states["registry.example.com/shop/api:2.0"] != "pinned" || states["registry.example.com/shop/worker:2.0"] != "missing" || len(states) != 2 {
				t.Errorf("images %v, want api pinned and worker missing", states)
			}
			if r.code != tc.code {
				t.Errorf("exit %d, want %d; errors %q", r.code, tc.code, r.report.Errors)
			}
			if tc.code == 2 && (len(r.report.Errors) != 1 || !strings.Contains(r.report.Errors[0], tc.name+":8: a document separator followed by \"!!map\"")) {
				t.Errorf("errors %q", r.report.Errors)
			}
		})
	}
}

// TestCheckGarbageDocument: a document that is not understood (not YAML,
// not an object, or a second object with no separator before it, which
// YAML decoders drop) is exit 2, named by its file, line and index, on
// standard error and in the report; the other documents are still judged.
func TestCheckGarbageDocument(t *testing.T) {
	records := []runtime.Image{pinnedRecord("registry.example.com/shop/api:2.0"), pinnedRecord("registry.example.com/shop/worker:2.0")}
	for name, garbage := range map[string]string{
		"binary":       "\x00garbage\x01\n",
		"no kind":      "image: registry.example.com/shop/cache:1\n",
		"two in one":   "{kind: ConfigMap}\n{kind: Pod, spec: {containers: [{name: c, image: nginx}]}}\n",
		"document end": "kind: ConfigMap\n...\nkind: Pod\nspec: {containers: [{name: c, image: nginx}]}\n",
	} {
		t.Run(name, func(t *testing.T) {
			f := writeFile(t, "broken.yaml", []byte(strings.Replace(checkTwoDeployments, "---\n", "---\n"+garbage+"---\n", 1)))
			r := runCheck(t, records, f)
			if r.code != 2 {
				t.Errorf("exit %d, want 2", r.code)
			}
			want := f + ":9: document 2: "
			if len(r.report.Errors) != 1 || !strings.HasPrefix(r.report.Errors[0], want) || !strings.Contains(r.stderr, "error: "+want) {
				t.Errorf("errors %q, stderr %q; want one beginning %q", r.report.Errors, r.stderr, want)
			}
			if len(r.report.Images) != 2 {
				t.Errorf("images %+v, want both Deployments'", r.report.Images)
			}
		})
	}
}

const checkImageVolume = `apiVersion: apps/v1
kind: Deployment
metadata: {name: infer, namespace: ml}
spec:
  template:
    spec:
      nodeSelector: {gpu: "yes"}
      containers:
        - name: server
          image: registry.example.com/ml/server:1
          volumeMounts: [{name: model, mountPath: /models}]
      volumes:
        - name: model
          image: {reference: "registry.example.com/ml/model:7", pullPolicy: IfNotPresent}
---
apiVersion: v1
kind: Pod
metadata: {name: bare, namespace: ml}
spec:
  containers: [{name: c, image: registry.example.com/ml/server:1}]
  volumes: [{name: tools, image: {reference: "registry.example.com/ml/tools:2"}}]
`

// TestCheckImageVolume: the images of image volumes are judged as the
// containers' are: the node lacks the model, and check says so.
func TestCheckImageVolume(t *testing.T) {
	records := []runtime.Image{pinnedRecord("registry.example.com/ml/server:1"), pinnedRecord("registry.example.com/ml/tools:2")}
	r := runCheck(t, records, writeFile(t, "ml.yaml", []byte(checkImageVolume)))
	got := map[string]report.Image{}
	for _, img := range r.report.Images {
		got[img.Ref] = img
	}
	if m := got["registry.example.com/ml/model:7"]; m.State != "missing" || len(m.UsedBy) != 1 || !strings.HasSuffix(m.UsedBy[0], "ml.yaml#1 Deployment ml/infer volumes/model") {
		t.Errorf("the model volume: %+v", m)
	}
	if tl := got["registry.example.com/ml/tools:2"]; tl.State != "pinned" || len(tl.UsedBy) != 1 || !strings.HasSuffix(tl.UsedBy[0], "ml.yaml#2 Pod ml/bare volumes/tools") {
		t.Errorf("the tools volume: %+v", tl)
	}
	if r.code != 1 || len(got) != 3 {
		t.Errorf("exit %d with %d images, want 1 with 3", r.code, len(got))
	}
}

const checkPullPolicies = `apiVersion: apps/v1
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
          containers: [{name: r, image: "registry.example.com/shop/api:2.0", imagePullPolicy: Never}, {name: new, image: "registry.example.com/shop/new:1"}]
`

const kubeletAlwaysVerify = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
clusterDNS: [10.96.0.10]
clusterDomain: cluster.local
imagePullCredentialsVerificationPolicy: AlwaysVerify
staticPodPath: /etc/kubernetes/manifests
`

const kubeletAllowlist = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages
preloadedImagesVerificationAllowlist:
  - registry.example.com/shop/*
  - docker.io/library/nginx
`

// TestCheckForcedPulls: with AlwaysVerify, every held image that a
// container or image volume uses with IfNotPresent or Never is one the
// kubelet would pull again (or refuse): a warning naming the image, the
// policy, the file and the fix, and a forcedPull in the report; Always
// pulls anyway, a missing image is reported as missing, and the exit
// status is the images' alone. NeverVerifyAllowlistedImages exempts what
// its allowlist names, as the pods write the names.
func TestCheckForcedPulls(t *testing.T) {
	records := []runtime.Image{
		pinnedRecord("registry.example.com/shop/api:2.0"), pinnedRecord("docker.io/library/nginx:1.27"),
		pinnedRecord("registry.example.com/shop/sidecar:1"), pinnedRecord("registry.example.com/shop/data:3"),
	}
	manifests := writeFile(t, "shop.yaml", []byte(checkPullPolicies))
	always := writeFile(t, "config.yaml", []byte(kubeletAlwaysVerify))
	r := runCheckKubelet(t, records, []string{always}, manifests)
	if r.code != 1 { // new:1 is missing
		t.Errorf("exit %d, want 1", r.code)
	}
	forced := map[string]*report.ForcedPull{}
	for _, img := range r.report.Images {
		forced[img.Ref] = img.ForcedPull
	}
	api := forced["registry.example.com/shop/api:2.0"]
	if api == nil || api.Policy != "AlwaysVerify" || api.From != always || strings.Join(api.PullPolicies, ",") != "IfNotPresent,Never" ||
		len(api.UsedBy) != 2 || strings.Join(api.Allowlist, ",") != "registry.example.com/shop/api" {
		t.Errorf("api: %+v", api)
	}
	if n := forced["docker.io/library/nginx:1.27"]; n == nil || strings.Join(n.Allowlist, ",") != "nginx" {
		t.Errorf("nginx: %+v, want the allowlist name as the pod writes it", n)
	}
	if d := forced["registry.example.com/shop/data:3"]; d == nil || !strings.Contains(d.Message, "refuse to start it") || !strings.Contains(d.Message, "volumes/data") {
		t.Errorf("the image volume: %+v", d)
	}
	if s := forced["registry.example.com/shop/sidecar:1"]; s != nil {
		t.Errorf("imagePullPolicy Always pulls anyway, whatever the verification: %+v", s)
	}
	if n := forced["registry.example.com/shop/new:1"]; n != nil {
		t.Errorf("a missing image: %+v", n)
	}
	if r.report.Kubelet == nil || r.report.Kubelet.Policy != "AlwaysVerify" {
		t.Errorf("kubelet %+v", r.report.Kubelet)
	}
	want := "warning: registry.example.com/shop/api:2.0: the kubelet would pull it although this node holds it (imagePullPolicy IfNotPresent), which fails where no registry answers, or refuse to start it (Never: ErrImageNeverPull): imagePullCredentialsVerificationPolicy AlwaysVerify in " +
		always + " has it verify the pull credentials of every image it did not pull itself, as it did not pull what holdfast imports (used by " + manifests +
		"#1 Deployment shop/api containers/api and 1 more); add registry.example.com/shop/api to preloadedImagesVerificationAllowlist with NeverVerifyAllowlistedImages, or set NeverVerifyPreloadedImages\n"
	if !strings.Contains(r.stderr, want) || strings.Count(r.stderr, "warning: ") != 3 {
		t.Errorf("stderr:\n%s\nwant 3 warnings, among them:\n%s", r.stderr, want)
	}

	// All held: exit 0 with the warnings.
	r = runCheckKubelet(t, append(records, pinnedRecord("registry.example.com/shop/new:1")), []string{always}, manifests)
	if r.code != 0 || strings.Count(r.stderr, "warning: ") != 4 {
		t.Errorf("every image pinned: exit %d, stderr:\n%s", r.code, r.stderr)
	}

	allow := writeFile(t, "50-allow.conf", []byte(kubeletAllowlist))
	r = runCheckKubelet(t, records, []string{always, allow}, manifests)
	var warned []string
	for _, img := range r.report.Images {
		if img.ForcedPull != nil {
			warned = append(warned, img.Ref)
			if img.ForcedPull.Policy != "NeverVerifyAllowlistedImages" || !strings.Contains(img.ForcedPull.Message, "preloadedImagesVerificationAllowlist names them, and it names no nginx") {
				t.Errorf("%s: %+v", img.Ref, img.ForcedPull)
			}
		}
	}
	if strings.Join(warned, ",") != "docker.io/library/nginx:1.27" {
		t.Errorf("warned of %q, want nginx alone (the pod names it nginx, not docker.io/library/nginx)", warned)
	}
}

// TestCheckKubeletConfigBroken: a kubelet configuration that does not
// parse is exit 2 naming the file; the images are still judged.
func TestCheckKubeletConfigBroken(t *testing.T) {
	records := []runtime.Image{pinnedRecord("registry.example.com/shop/api:2.0"), pinnedRecord("registry.example.com/shop/worker:2.0")}
	bad := writeFile(t, "config.yaml", []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimagePullCredentialsVerificationPolicy: [\n"))
	r := runCheckKubelet(t, records, []string{bad}, writeFile(t, "shop.yaml", []byte(checkTwoDeployments)))
	if r.code != 2 || len(r.report.Errors) != 1 || !strings.HasPrefix(r.report.Errors[0], "kubelet configuration "+bad+": ") || len(r.report.Images) != 2 {
		t.Errorf("exit %d, errors %q, %d images", r.code, r.report.Errors, len(r.report.Images))
	}
}

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
	var out, errOut bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	o := &options{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	set := readSet(cmd, o, files)
	err := checkNode(cmd, set, records, "", "json", false)
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
	got := map[string]CheckImage{}
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

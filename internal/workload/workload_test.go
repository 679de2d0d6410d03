package workload

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

func read(t *testing.T, files ...string) *Set {
	t.Helper()
	var s Set
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s.Read(f, data)
	}
	return &s
}

func refs(s *Set) []string {
	var out []string
	for _, img := range s.Images() {
		out = append(out, img.Ref)
	}
	return out
}

// TestEveryKind: the images of every workload kind, of a List's items and
// of an unknown kind's pod template (noted), each container list, names
// normalised as the kubelet asks for them; a ConfigMap names none.
func TestEveryKind(t *testing.T) {
	s := read(t, "testdata/kinds.yaml")
	if len(s.Errors) != 0 {
		t.Fatalf("errors: %v", s.Errors)
	}
	want := []string{
		"docker.io/library/alpine:3.20",
		"docker.io/library/busybox:latest",
		"docker.io/library/nginx:1.27",
		"docker.io/library/postgres:16",
		"docker.io/nicolaka/netshoot:v0.13",
		"registry.example.com/old:1",
		"registry.example.com/shop/api@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		"registry.example.com/shop/canary:3",
		"registry.example.com/shop/migrate:2.1",
		"registry.example.com/shop/report:1",
		"registry.example.com/shop/web:2.1",
	}
	if got := refs(s); !slices.Equal(got, want) {
		t.Errorf("images:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, img := range s.Images() {
		switch img.Ref {
		case "docker.io/library/nginx:1.27":
			if len(img.Uses) != 2 {
				t.Errorf("nginx:1.27 used %v, want by the ReplicaSet and the listed Pod", img.Uses)
			}
		case "docker.io/library/busybox:latest":
			if u := img.Uses[0]; u.String() != "testdata/kinds.yaml#1 Pod shop/web initContainers/setup" {
				t.Errorf("busybox used by %q", u)
			}
		case "docker.io/nicolaka/netshoot:v0.13":
			if u := img.Uses[0]; u.Container != "ephemeralContainers/debug" {
				t.Errorf("netshoot used by %q", u)
			}
		case "registry.example.com/shop/canary:3":
			if u := img.Uses[0]; u.Kind != "Rollout" || u.Found != "spec.template.spec" {
				t.Errorf("the Rollout's image found as %+v", u)
			}
		}
	}
	if len(s.Notes) != 1 || !strings.Contains(s.Notes[0], "Rollout canary") {
		t.Errorf("notes %q, want the Rollout's pod spec", s.Notes)
	}
}

// TestChart: helm template of holdfast's own chart names its image for
// both containers of the DaemonSet.
func TestChart(t *testing.T) {
	s := read(t, "testdata/chart.yaml")
	if len(s.Errors) != 0 {
		t.Fatalf("errors: %v", s.Errors)
	}
	imgs := s.Images()
	if len(imgs) != 1 || imgs[0].Ref != "ghcr.io/holdfast-project/holdfast:0.1.0" || len(imgs[0].Uses) != 2 {
		t.Fatalf("images %+v", imgs)
	}
	var cs []string
	for _, u := range imgs[0].Uses {
		cs = append(cs, u.Kind+" "+u.Namespace+"/"+u.Name+" "+u.Container)
	}
	if want := []string{"DaemonSet holdfast-system/hf-holdfast containers/holdfast", "DaemonSet holdfast-system/hf-holdfast containers/reporter"}; !slices.Equal(cs, want) {
		t.Errorf("uses %q, want %q", cs, want)
	}
}

// TestBadInput: a document that does not parse is an error naming the file,
// the line it begins at and its index, and the next one is still read; so is an image reference
// that does not parse, and a container without an image.
func TestBadInput(t *testing.T) {
	var s Set
	s.Read("bad.yaml", []byte(`kind: Pod
metadata: {name: a}
spec: {containers: [{name: c, image: "nginx:1"}]}
---
kind: Pod
spec: {containers: [{name: c, image: "nginx:1"
---
kind: Deployment
metadata: {name: d}
spec: {template: {spec: {containers: [{name: x, image: "Not A Ref"}, {name: w}]}}}
---
- just
- a list
---
kind: Pod
metadata: {name: z}
spec: {containers: [{name: c, image: "redis:7"}]}
`))
	if got, want := refs(&s), []string{"docker.io/library/nginx:1", "docker.io/library/redis:7"}; !slices.Equal(got, want) {
		t.Errorf("images %q, want %q", got, want)
	}
	var errs []string
	for _, e := range s.Errors {
		errs = append(errs, e.Error())
	}
	for _, want := range []string{"bad.yaml:5: document 2: error converting YAML to JSON: yaml: line 6: ", "bad.yaml#3 Deployment d containers/x: image invalid reference", "bad.yaml#3 Deployment d containers/w: no image", "bad.yaml:12: document 4: not a Kubernetes object (a list)"} {
		if !slices.ContainsFunc(errs, func(e string) bool { return strings.HasPrefix(e, want) }) {
			t.Errorf("no error starting %q in:\n%s", want, strings.Join(errs, "\n"))
		}
	}
	if len(errs) != 4 {
		t.Errorf("%d errors, want 4:\n%s", len(errs), strings.Join(errs, "\n"))
	}
}

// TestLines: a file of references, one a line, with comments; JSON is read
// as the YAML it is.
func TestLines(t *testing.T) {
	var s Set
	s.Read("list.txt", []byte("# what the release needs\nnginx:1.27\nregistry.example.com/app:2  # the app\n\nbusybox\n"))
	if got, want := refs(&s), []string{"docker.io/library/busybox:latest", "docker.io/library/nginx:1.27", "registry.example.com/app:2"}; !slices.Equal(got, want) {
		t.Errorf("images %q, want %q", got, want)
	}
	if u := s.Images()[2].Uses[0]; u.String() != "list.txt:3" {
		t.Errorf("use %q, want list.txt:3", u)
	}
	var j Set
	j.Read("pod.json", []byte(`{"apiVersion":"v1","kind":"List","items":[{"kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"nginx"}]}}]}`))
	if got := refs(&j); !slices.Equal(got, []string{"docker.io/library/nginx:latest"}) || len(j.Errors) != 0 {
		t.Errorf("JSON List: images %q, errors %v", got, j.Errors)
	}
}

// TestJudge: pinned, present (a record not pinned), missing, and for a
// digest reference the record of its digest name, a mismatch when the node
// holds the repository at another digest only.
func TestJudge(t *testing.T) {
	d1, d2 := digest.FromString("one"), digest.FromString("two")
	pinned := map[string]string{runtime.LabelCRIPinned: runtime.PinnedValue}
	rec := func(name string, d digest.Digest, labels map[string]string) runtime.Image {
		return runtime.Image{Name: name, Target: ocispec.Descriptor{Digest: d}, Labels: labels}
	}
	records := []runtime.Image{
		rec("docker.io/library/nginx:1.27", d1, pinned),
		rec("docker.io/library/nginx@"+d1.String(), d1, pinned),
		rec("docker.io/library/redis:7", d2, nil),
		rec("registry.example.com/app:1", d1, pinned),
		rec(d1.String(), d1, nil), // the CRI's own record
	}
	var s Set
	s.Read("x.txt", []byte("nginx:1.27\nnginx@"+d1.String()+"\nnginx:9@"+d1.String()+"\nredis:7\npostgres:16\nregistry.example.com/app@"+d2.String()+"\nregistry.example.com/new@"+d2.String()+"\n"))
	got := map[string]report.State{}
	for _, v := range Judge(s.Images(), records) {
		got[v.Ref] = v.State
		if v.State == report.Mismatch && (len(v.Others) != 1 || v.Others[0] != d1.String()) {
			t.Errorf("%s: others %v, want %s", v.Ref, v.Others, d1)
		}
	}
	want := map[string]report.State{
		"docker.io/library/nginx:1.27":             report.Pinned,
		"docker.io/library/nginx@" + d1.String():   report.Pinned,
		"docker.io/library/nginx:9@" + d1.String(): report.Pinned,
		"docker.io/library/redis:7":                report.Present,
		"docker.io/library/postgres:16":            report.Missing,
		"registry.example.com/app@" + d2.String():  report.Mismatch,
		"registry.example.com/new@" + d2.String():  report.Missing,
	}
	for ref, st := range want {
		if got[ref] != st {
			t.Errorf("%s: %s, want %s", ref, got[ref], st)
		}
	}
}

// BenchmarkJudge is one judgment of 2,000 required images (half of them
// digest references) against a node of 2,000 records: what the agent does
// after every pass and image event.
func BenchmarkJudge(b *testing.B) {
	var records []runtime.Image
	var imgs []Image
	for i := range 2000 {
		d := digest.FromString(fmt.Sprint(i))
		name := fmt.Sprintf("registry.example.com/team%d/app:%d", i%50, i)
		records = append(records, runtime.Image{Name: name, Target: ocispec.Descriptor{Digest: d},
			Labels: map[string]string{runtime.LabelCRIPinned: runtime.PinnedValue}})
		ref := name
		if i%2 == 1 {
			ref = fmt.Sprintf("registry.example.com/team%d/app@%s", i%50, d)
		}
		imgs = append(imgs, Image{Ref: ref})
	}
	for b.Loop() {
		if vs := Judge(imgs, records); len(vs) != 2000 {
			b.Fatal(len(vs))
		}
	}
}

// TestReady: pinned is ready; present only when unpinned images are
// allowed; missing and mismatch never.
func TestReady(t *testing.T) {
	for _, tc := range []struct {
		state         report.State
		strict, loose bool
	}{
		{report.Pinned, true, true},
		{report.Present, false, true},
		{report.Missing, false, false},
		{report.Mismatch, false, false},
	} {
		if got := Ready(tc.state, false); got != tc.strict {
			t.Errorf("Ready(%s, false) = %v", tc.state, got)
		}
		if got := Ready(tc.state, true); got != tc.loose {
			t.Errorf("Ready(%s, true) = %v", tc.state, got)
		}
	}
}

// TestPullSecrets: each use carries its pod spec's imagePullSecrets, once
// each, wherever the kind keeps the pod spec; a pod without has none.
func TestPullSecrets(t *testing.T) {
	var s Set
	s.Read("app.yaml", []byte(`apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: shop}
spec:
  schedule: "0 3 * * *"
  jobTemplate: {spec: {template: {spec: {imagePullSecrets: [{name: regcred}, {name: backup}, {name: regcred}, {}],
    initContainers: [{name: i, image: "registry.example.com/shop/init:1"}], containers: [{name: c, image: "registry.example.com/shop/job:1"}]}}}}
---
apiVersion: v1
kind: Pod
metadata: {name: plain}
spec: {containers: [{name: c, image: "registry.example.com/shop/plain:1"}]}
`))
	if len(s.Errors) > 0 {
		t.Fatal(s.Errors)
	}
	got := map[string]string{}
	for _, img := range s.Images() {
		for _, u := range img.Uses {
			got[img.Ref] = strings.Join(u.PullSecrets, ",")
			if img.Ref == "registry.example.com/shop/plain:1" && u.PullSecrets != nil {
				t.Errorf("a pod without imagePullSecrets: %q", u.PullSecrets)
			}
		}
	}
	want := map[string]string{
		"registry.example.com/shop/init:1":  "regcred,backup",
		"registry.example.com/shop/job:1":   "regcred,backup",
		"registry.example.com/shop/plain:1": "",
	}
	if !maps.Equal(got, want) {
		t.Errorf("pull secrets by image: %v, want %v", got, want)
	}
}

// TestCRIName: a digest reference is looked up as repo@digest, its tag
// dropped; a tag as it is.
func TestCRIName(t *testing.T) {
	d := digest.FromString("x").String()
	for ref, want := range map[string][3]string{
		"docker.io/library/nginx:1.27":    {"docker.io/library/nginx:1.27", "docker.io/library/nginx", ""},
		"registry.example.com/a/b:1@" + d: {"registry.example.com/a/b@" + d, "registry.example.com/a/b", d},
		"registry.example.com/a/b@" + d:   {"registry.example.com/a/b@" + d, "registry.example.com/a/b", d},
		"Not A Reference":                 {"Not A Reference", "", ""},
	} {
		if n, r, g := CRIName(ref); [3]string{n, r, g} != want {
			t.Errorf("CRIName(%q) = %q, %q, %q, want %q", ref, n, r, g, want)
		}
	}
}

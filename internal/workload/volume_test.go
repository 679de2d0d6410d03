package workload

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestImageVolumes: an image volume's reference is an image the node must
// hold, for every kind that carries a pod spec, bare Pods and an unknown
// kind's pod template included; its use names the volume and has the pod's
// placement. A volume without a reference is an error.
func TestImageVolumes(t *testing.T) {
	kinds := map[string]string{
		"Pod":                   "spec: %s",
		"PodTemplate":           "template: {spec: %s}",
		"Deployment":            "spec: {template: {spec: %s}}",
		"ReplicaSet":            "spec: {template: {spec: %s}}",
		"StatefulSet":           "spec: {template: {spec: %s}}",
		"DaemonSet":             "spec: {template: {spec: %s}}",
		"Job":                   "spec: {template: {spec: %s}}",
		"ReplicationController": "spec: {template: {spec: %s}}",
		"CronJob":               "spec: {jobTemplate: {spec: {template: {spec: %s}}}}",
		"Rollout":               "spec: {template: {spec: %s}}",
	}
	var docs []string
	var want []string
	for _, kind := range slices.Sorted(func(yield func(string) bool) {
		for k := range kinds {
			if !yield(k) {
				return
			}
		}
	}) {
		ref := "registry.example.com/models/" + strings.ToLower(kind) + ":1"
		spec := fmt.Sprintf(`{nodeSelector: {gpu: "yes"}, containers: [{name: c, image: "app:1", volumeMounts: [{name: m, mountPath: /m}]}],
  volumes: [{name: cache, emptyDir: {}}, {name: m, image: {reference: %q, pullPolicy: IfNotPresent}}]}`, ref)
		docs = append(docs, fmt.Sprintf("apiVersion: v1\nkind: %s\nmetadata: {name: x, namespace: ns}\n%s\n", kind, fmt.Sprintf(kinds[kind], spec)))
		want = append(want, ref)
	}
	docs = append(docs, "kind: Pod\nmetadata: {name: bad}\nspec: {containers: [{name: c, image: \"app:1\"}], volumes: [{name: v, image: {pullPolicy: Always}}]}\n")
	var s Set
	s.Read("vol.yaml", []byte(strings.Join(docs, "---\n")))
	want = append(want, "docker.io/library/app:1")
	slices.Sort(want)
	if got := refs(&s); !slices.Equal(got, want) {
		t.Errorf("images:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, img := range s.Images() {
		if !strings.HasPrefix(img.Ref, "registry.example.com/models/") {
			continue
		}
		u := img.Uses[0]
		if u.Container != "volumes/m" || !strings.HasSuffix(u.String(), " volumes/m") {
			t.Errorf("%s used by %q", img.Ref, u)
		}
		if u.Placement == nil || u.Placement.NodeSelector["gpu"] != "yes" {
			t.Errorf("%s: placement %+v, want the pod's", img.Ref, u.Placement)
		}
	}
	if len(s.Errors) != 1 || s.Errors[0].Error() != "vol.yaml#11 Pod bad volumes/v: no image reference" {
		t.Errorf("errors %v", s.Errors)
	}
}

// TestPullPolicies: each use carries its image as written and its pull
// policy, defaulted as the API server defaults it; a line of references
// gets the default, the sandbox image none.
func TestPullPolicies(t *testing.T) {
	d := "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	var s Set
	s.Read("p.yaml", []byte(`kind: Pod
metadata: {name: p}
spec:
  containers:
    - {name: never, image: "a:1", imagePullPolicy: Never}
    - {name: tagged, image: "b:1"}
    - {name: untagged, image: "c"}
    - {name: latest, image: "d:latest"}
    - {name: digest, image: "e@`+d+`"}
    - {name: latestdigest, image: "f:latest@`+d+`"}
  volumes:
    - {name: v, image: {reference: "g:2"}}
    - {name: w, image: {reference: "h", pullPolicy: Never}}
`))
	s.Read("l.txt", []byte("i:3\nj\n"))
	s.Add("registry.k8s.io/pause:3.10", Use{File: "the pod sandbox image"})
	got := map[string]string{}
	for _, img := range s.Images() {
		u := img.Uses[0]
		got[u.Image] = u.PullPolicy
	}
	want := map[string]string{
		"a:1": "Never", "b:1": "IfNotPresent", "c": "Always", "d:latest": "Always", "e@" + d: "IfNotPresent", "f:latest@" + d: "Always",
		"g:2": "IfNotPresent", "h": "Never", "i:3": "IfNotPresent", "j": "Always", "": "",
	}
	if len(got) != len(want) {
		t.Errorf("uses %v, want %v", got, want)
	}
	for img, p := range want {
		if got[img] != p {
			t.Errorf("%q: pull policy %q, want %q", img, got[img], p)
		}
	}
}

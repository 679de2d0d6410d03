package reporter

import (
	"fmt"
	"log/slog"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func podSpec(images ...string) corev1.PodSpec {
	var s corev1.PodSpec
	for i, img := range images {
		s.Containers = append(s.Containers, corev1.Container{Name: fmt.Sprintf("c%d", i), Image: img})
	}
	return s
}

func deployment(ns, name string, spec corev1.PodSpec) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}
}

func controller(kind, name string) []metav1.OwnerReference {
	yes := true
	return []metav1.OwnerReference{{Kind: kind, Name: name, Controller: &yes}}
}

// TestWorkloadOf: each kind's pod spec is found where it keeps it; the
// ReplicaSets of Deployments, the Jobs of CronJobs and finished Jobs are
// left to their owners; other objects have none.
func TestWorkloadOf(t *testing.T) {
	spec := podSpec("nginx")
	cron := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "c"}}
	cron.Spec.JobTemplate.Spec.Template.Spec = spec
	done := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "done"},
		Spec:   batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: spec}},
		Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}}
	for _, tc := range []struct {
		obj  any
		kind string // "": none
	}{
		{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "p"}, Spec: spec}, "Pod"},
		{deployment("n", "d", spec), "Deployment"},
		{&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "s"}, Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}, "StatefulSet"},
		{&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "ds"}, Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}, "DaemonSet"},
		{&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "rs"}, Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}, "ReplicaSet"},
		{&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "rs", OwnerReferences: controller("Deployment", "d")}, Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}, ""},
		{&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "j"}, Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}, "Job"},
		{&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "j", OwnerReferences: controller("CronJob", "c")}, Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}, ""},
		{done, ""},
		{cron, "CronJob"},
		{&corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "rc"}, Spec: corev1.ReplicationControllerSpec{Template: &corev1.PodTemplateSpec{Spec: spec}}}, "ReplicationController"},
		{&corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "rc"}}, ""},
		{&corev1.ConfigMap{}, ""},
	} {
		w, ok := workloadOf(tc.obj)
		if ok != (tc.kind != "") || w.Kind != tc.kind {
			t.Errorf("%T: kind %q (ok %v), want %q", tc.obj, w.Kind, ok, tc.kind)
			continue
		}
		if ok && (w.Namespace != "n" || len(w.Spec.Containers) != 1 || w.Spec.Containers[0].Image != "nginx") {
			t.Errorf("%T: %+v, want namespace n and the spec with nginx", tc.obj, w)
		}
	}
}

func TestImagesOf(t *testing.T) {
	spec := corev1.PodSpec{
		InitContainers:      []corev1.Container{{Name: "setup", Image: "busybox"}},
		Containers:          []corev1.Container{{Name: "web", Image: "nginx:1.27"}, {Name: "side", Image: "envoy"}},
		EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "alpine"}}},
		Volumes:             []corev1.Volume{{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}}, imageVolume("model", "registry.example.com/model:1")},
	}
	got := imagesOf(&spec)
	want := []containerImage{{"busybox", "initContainers/setup"}, {"nginx:1.27", "containers/web"}, {"envoy", "containers/side"}, {"alpine", "ephemeralContainers/debug"},
		{"registry.example.com/model:1", "volumes/model"}}
	if !slices.Equal(got, want) {
		t.Fatalf("imagesOf: %v, want %v", got, want)
	}
}

func term(exprs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: exprs}
}

func req(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func withAffinity(terms ...corev1.NodeSelectorTerm) corev1.PodSpec {
	return corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}}
}

// TestMayRunOn: nodeName, nodeSelector and the required node affinity
// against the node's labels; what is not judged counts as a match.
func TestMayRunOn(t *testing.T) {
	labels := map[string]string{"kubernetes.io/hostname": "node-1", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "gpu": "yes"}
	for _, tc := range []struct {
		name   string
		spec   corev1.PodSpec
		labels map[string]string
		want   bool
	}{
		{"nothing", corev1.PodSpec{}, labels, true},
		{"nodeName here", corev1.PodSpec{NodeName: "node-1"}, labels, true},
		{"nodeName elsewhere", corev1.PodSpec{NodeName: "node-2"}, labels, false},
		{"nodeSelector match", corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/os": "linux"}}, labels, true},
		{"nodeSelector other host", corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": "node-2"}}, labels, false},
		{"nodeSelector missing label", corev1.PodSpec{NodeSelector: map[string]string{"disk": "ssd"}}, labels, false},
		{"labels unknown", corev1.PodSpec{NodeSelector: map[string]string{"disk": "ssd"}}, nil, true},
		{"In", withAffinity(term(req("kubernetes.io/os", corev1.NodeSelectorOpIn, "linux"))), labels, true},
		{"In other", withAffinity(term(req("kubernetes.io/os", corev1.NodeSelectorOpIn, "windows"))), labels, false},
		{"In absent", withAffinity(term(req("zone", corev1.NodeSelectorOpIn, "a"))), labels, false},
		{"NotIn", withAffinity(term(req("kubernetes.io/arch", corev1.NodeSelectorOpNotIn, "arm64"))), labels, true},
		{"NotIn this", withAffinity(term(req("kubernetes.io/arch", corev1.NodeSelectorOpNotIn, "amd64"))), labels, false},
		{"NotIn absent", withAffinity(term(req("zone", corev1.NodeSelectorOpNotIn, "a"))), labels, true},
		{"Exists", withAffinity(term(req("gpu", corev1.NodeSelectorOpExists))), labels, true},
		{"Exists absent", withAffinity(term(req("tpu", corev1.NodeSelectorOpExists))), labels, false},
		{"DoesNotExist", withAffinity(term(req("tpu", corev1.NodeSelectorOpDoesNotExist))), labels, true},
		{"DoesNotExist present", withAffinity(term(req("gpu", corev1.NodeSelectorOpDoesNotExist))), labels, false},
		{"AND fails", withAffinity(term(req("kubernetes.io/os", corev1.NodeSelectorOpIn, "linux"), req("gpu", corev1.NodeSelectorOpDoesNotExist))), labels, false},
		{"OR holds", withAffinity(term(req("kubernetes.io/hostname", corev1.NodeSelectorOpIn, "node-2")), term(req("kubernetes.io/hostname", corev1.NodeSelectorOpIn, "node-1", "node-3"))), labels, true},
		{"OR fails", withAffinity(term(req("kubernetes.io/hostname", corev1.NodeSelectorOpIn, "node-2")), term(req("kubernetes.io/hostname", corev1.NodeSelectorOpIn, "node-3"))), labels, false},
		{"Gt not judged", withAffinity(term(req("cores", corev1.NodeSelectorOpGt, "64"))), labels, true},
		{"Gt with a failing expression", withAffinity(term(req("cores", corev1.NodeSelectorOpGt, "64"), req("kubernetes.io/os", corev1.NodeSelectorOpIn, "windows"))), labels, false},
		{"matchFields not judged", withAffinity(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{req("metadata.name", corev1.NodeSelectorOpIn, "node-2")}}), labels, true},
		{"empty term", withAffinity(corev1.NodeSelectorTerm{}), labels, false},
	} {
		if got := mayRunOn(&tc.spec, "node-1", tc.labels); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRequiredSet: references normalised and sorted, users named and
// capped, Pods of other nodes and workloads that cannot land here left
// out, a reference that does not parse skipped.
func TestRequiredSet(t *testing.T) {
	labels := map[string]string{"kubernetes.io/hostname": "node-1"}
	objs := []any{
		deployment("shop", "web", podSpec("nginx:1.27", "Bad:Ref")),
		deployment("shop", "elsewhere", corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": "node-2"}, Containers: []corev1.Container{{Name: "x", Image: "redis"}}}),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1"}, Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "web", Image: "docker.io/library/nginx:1.27"}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "other"}, Spec: corev1.PodSpec{NodeName: "node-2", Containers: []corev1.Container{{Name: "x", Image: "memcached"}}}},
	}
	for i := range 7 {
		objs = append(objs, deployment("many", fmt.Sprintf("d%d", i), podSpec("busybox")))
	}
	set := requiredSet(objs, "node-1", labels, slog.New(slog.DiscardHandler))
	var refs []string
	for _, img := range set.Images {
		refs = append(refs, img.Ref)
	}
	if want := []string{"docker.io/library/busybox:latest", "docker.io/library/nginx:1.27"}; !slices.Equal(refs, want) {
		t.Fatalf("refs %v, want %v", refs, want)
	}
	if got, want := set.Images[1].UsedBy, []string{"Deployment shop/web containers/c0", "Pod shop/web-1 containers/web"}; !slices.Equal(got, want) {
		t.Errorf("nginx used by %q, want %q", got, want)
	}
	if got := set.Images[0].UsedBy; len(got) != shownUsers+1 || got[0] != "Deployment many/d0 containers/c0" || got[shownUsers] != "and 2 more" {
		t.Errorf("busybox used by %q, want 5 users and \"and 2 more\"", got)
	}
}

// imageVolume is a pod volume of an image (Kubernetes 1.36).
func imageVolume(name, ref string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: ref, PullPolicy: corev1.PullIfNotPresent}}}
}

// TestRequiredSetImageVolumes: the reference of an image volume is required
// like a container's image, of a Pod bound to the node and of a workload
// that may land on it, and not of one that cannot; a volume of another
// kind names none.
func TestRequiredSetImageVolumes(t *testing.T) {
	labels := map[string]string{"kubernetes.io/hostname": "node-1", "gpu": "yes"}
	withVolumes := func(spec corev1.PodSpec, vols ...corev1.Volume) corev1.PodSpec {
		spec.Volumes = append([]corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}, vols...)
		return spec
	}
	gpu := withVolumes(podSpec("registry.example.com/ml/server:1"), imageVolume("model", "registry.example.com/ml/model:7"))
	gpu.NodeSelector = map[string]string{"gpu": "yes"}
	tpu := withVolumes(podSpec("registry.example.com/ml/server:1"), imageVolume("model", "registry.example.com/ml/tpu-model:1"))
	tpu.NodeSelector = map[string]string{"tpu": "yes"}
	bound := withVolumes(podSpec("registry.example.com/ml/server:1"), imageVolume("tools", "registry.example.com/ml/tools:2"))
	bound.NodeName = "node-1"
	objs := []any{
		deployment("ml", "infer", gpu),
		deployment("ml", "tpu", tpu),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "debug"}, Spec: bound},
	}
	set := requiredSet(objs, "node-1", labels, slog.New(slog.DiscardHandler))
	got := map[string][]string{}
	for _, img := range set.Images {
		got[img.Ref] = img.UsedBy
	}
	want := map[string][]string{
		"registry.example.com/ml/model:7":  {"Deployment ml/infer volumes/model"},
		"registry.example.com/ml/server:1": {"Deployment ml/infer containers/c0", "Pod ml/debug containers/c0"},
		"registry.example.com/ml/tools:2":  {"Pod ml/debug volumes/tools"},
	}
	if len(got) != len(want) {
		t.Errorf("set %v, want %v", got, want)
	}
	for ref, users := range want {
		if !slices.Equal(got[ref], users) {
			t.Errorf("%s used by %q, want %q", ref, got[ref], users)
		}
	}
}

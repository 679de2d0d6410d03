package reporter

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/holdfast-project/holdfast/internal/workload"
)

// readerUse is what both pod-spec readers say of one image a workload
// names: where, and where its pod may run.
type readerUse struct {
	Kind, Namespace, Name, Container, Image string
	Placement                               workload.Placement
}

// typedUses is what the reporter's typed reader (workloadOf, imagesOf,
// placementOf) reads of obj.
func typedUses(obj any) ([]readerUse, bool) {
	w, ok := workloadOf(obj)
	if !ok {
		return nil, false
	}
	var out []readerUse
	for _, ci := range imagesOf(w.Spec) {
		out = append(out, readerUse{w.Kind, w.Namespace, w.Name, ci.Container, ci.Image, *placementOf(w.Spec)})
	}
	return out, true
}

// manifestUses is what holdfast check's manifest reader (workload.Set)
// reads of obj written as JSON, as kubectl get -o json writes it.
func manifestUses(t *testing.T, obj any) []readerUse {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var s workload.Set
	s.Read("obj.json", data)
	if len(s.Errors) > 0 {
		t.Fatalf("reading %s: %v", data, s.Errors)
	}
	var out []readerUse
	for _, img := range s.Images() {
		for _, u := range img.Uses {
			p := workload.Placement{}
			if u.Placement != nil {
				p = *u.Placement
			}
			out = append(out, readerUse{u.Kind, u.Namespace, u.Name, u.Container, u.Image, p})
		}
	}
	return out
}

// sortedUses sorts uses, and says a placement's empty parts as nil, as the
// typed reader keeps them.
func sortedUses(uses []readerUse) []readerUse {
	for i := range uses {
		p := &uses[i].Placement
		if len(p.NodeSelector) == 0 {
			p.NodeSelector = nil
		}
		for j := range p.Terms {
			for k := range p.Terms[j].Exprs {
				if len(p.Terms[j].Exprs[k].Values) == 0 {
					p.Terms[j].Exprs[k].Values = nil
				}
			}
		}
	}
	slices.SortFunc(uses, func(a, b readerUse) int {
		return slices.Compare([]string{a.Kind, a.Namespace, a.Name, a.Container, a.Image}, []string{b.Kind, b.Namespace, b.Name, b.Container, b.Image})
	})
	return uses
}

// fullSpec has every part of a pod spec either reader reads: init, regular
// and ephemeral containers, an image volume, a nodeSelector and a required
// node affinity (In, NotIn, Exists, DoesNotExist, a term with matchFields),
// and tolerations, which neither judges.
func fullSpec() corev1.PodSpec {
	s := podSpec("nginx:1.27", "registry.example.com/shop/web@sha256:"+fmt.Sprintf("%064d", 7))
	s.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox"}}
	s.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "alpine:3"}}}
	s.Volumes = []corev1.Volume{imageVolume("models", "registry.example.com/ml/model:7"), {Name: "scratch"}}
	s.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
	s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{
			term(req("zone", corev1.NodeSelectorOpIn, "a", "b"), req("gpu", corev1.NodeSelectorOpExists)),
			term(req("pool", corev1.NodeSelectorOpNotIn, "spot"), req("tainted", corev1.NodeSelectorOpDoesNotExist)),
			{MatchFields: []corev1.NodeSelectorRequirement{req("metadata.name", corev1.NodeSelectorOpIn, "node-1")}},
		}}}}
	s.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	return s
}

// TestPodSpecReadersAgree: the reporter reads workloads as typed objects
// from its informers, holdfast check reads them from manifests; fed the
// same objects, of every kind both know, they find the same images, used by
// the same containers, placed alike.
func TestPodSpecReadersAgree(t *testing.T) {
	full, plain := fullSpec(), podSpec("redis:7")
	bound := podSpec("pause:3.10")
	bound.NodeName = "node-1"
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: "shop", Name: name} }
	typeMeta := func(apiVersion, kind string) metav1.TypeMeta {
		return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
	}
	tmpl := func(s corev1.PodSpec) corev1.PodTemplateSpec { return corev1.PodTemplateSpec{Spec: s} }
	cron := func(s corev1.PodSpec) *batchv1.CronJob {
		c := &batchv1.CronJob{TypeMeta: typeMeta("batch/v1", "CronJob"), ObjectMeta: meta("nightly")}
		c.Spec.JobTemplate.Spec.Template.Spec = s
		return c
	}
	var objs []any
	for _, s := range []corev1.PodSpec{full, plain, bound} {
		objs = append(objs,
			&corev1.Pod{TypeMeta: typeMeta("v1", "Pod"), ObjectMeta: meta("pod"), Spec: s},
			&appsv1.Deployment{TypeMeta: typeMeta("apps/v1", "Deployment"), ObjectMeta: meta("web"), Spec: appsv1.DeploymentSpec{Template: tmpl(s)}},
			&appsv1.StatefulSet{TypeMeta: typeMeta("apps/v1", "StatefulSet"), ObjectMeta: meta("db"), Spec: appsv1.StatefulSetSpec{Template: tmpl(s)}},
			&appsv1.DaemonSet{TypeMeta: typeMeta("apps/v1", "DaemonSet"), ObjectMeta: meta("agent"), Spec: appsv1.DaemonSetSpec{Template: tmpl(s)}},
			&appsv1.ReplicaSet{TypeMeta: typeMeta("apps/v1", "ReplicaSet"), ObjectMeta: meta("rs"), Spec: appsv1.ReplicaSetSpec{Template: tmpl(s)}},
			&batchv1.Job{TypeMeta: typeMeta("batch/v1", "Job"), ObjectMeta: meta("once"), Spec: batchv1.JobSpec{Template: tmpl(s)}},
			cron(s),
			&corev1.ReplicationController{TypeMeta: typeMeta("v1", "ReplicationController"), ObjectMeta: meta("rc"),
				Spec: corev1.ReplicationControllerSpec{Template: &corev1.PodTemplateSpec{Spec: s}}},
		)
	}
	kinds := map[string]bool{}
	for _, obj := range objs {
		typed, ok := typedUses(obj)
		if !ok {
			t.Fatalf("%T: the typed reader reads no pod spec", obj)
		}
		manifest := manifestUses(t, obj)
		if len(typed) == 0 {
			t.Fatalf("%T: no images read", obj)
		}
		kinds[typed[0].Kind] = true
		if got, want := sortedUses(manifest), sortedUses(typed); !reflect.DeepEqual(got, want) {
			t.Errorf("%T: the manifest reader reads\n%+v\nthe typed reader\n%+v", obj, got, want)
		}
	}
	if len(kinds) != 8 {
		t.Errorf("kinds read %v, want the 8 of workloadOf", kinds)
	}
}

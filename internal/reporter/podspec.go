package reporter

import (
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/holdfast-project/holdfast/internal/workload"
)

// podOwner is an object with a pod spec: its kind, namespace and name, and
// the spec.
type podOwner struct {
	Kind, Namespace, Name string
	Spec                  *corev1.PodSpec
}

// workloadOf returns the pod spec of a Pod or of a workload object (a
// CronJob's is that of its job template). ok is false for any other object,
// and for objects whose own owner's template stands for them: a ReplicaSet
// of a Deployment, a Job of a CronJob (their older revisions keep images no
// longer used), and a Job that has finished (it starts no pod again).
func workloadOf(obj any) (w podOwner, ok bool) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return podOwner{"Pod", o.Namespace, o.Name, &o.Spec}, true
	case *appsv1.Deployment:
		return podOwner{"Deployment", o.Namespace, o.Name, &o.Spec.Template.Spec}, true
	case *appsv1.StatefulSet:
		return podOwner{"StatefulSet", o.Namespace, o.Name, &o.Spec.Template.Spec}, true
	case *appsv1.DaemonSet:
		return podOwner{"DaemonSet", o.Namespace, o.Name, &o.Spec.Template.Spec}, true
	case *appsv1.ReplicaSet:
		if ownedBy(o.OwnerReferences, "Deployment") {
			return podOwner{}, false
		}
		return podOwner{"ReplicaSet", o.Namespace, o.Name, &o.Spec.Template.Spec}, true
	case *batchv1.Job:
		if ownedBy(o.OwnerReferences, "CronJob") || finished(o) {
			return podOwner{}, false
		}
		return podOwner{"Job", o.Namespace, o.Name, &o.Spec.Template.Spec}, true
	case *batchv1.CronJob:
		return podOwner{"CronJob", o.Namespace, o.Name, &o.Spec.JobTemplate.Spec.Template.Spec}, true
	case *corev1.ReplicationController:
		if o.Spec.Template == nil {
			return podOwner{}, false
		}
		return podOwner{"ReplicationController", o.Namespace, o.Name, &o.Spec.Template.Spec}, true
	}
	return podOwner{}, false
}

func ownedBy(refs []metav1.OwnerReference, kind string) bool {
	return slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool {
		return r.Kind == kind && r.Controller != nil && *r.Controller
	})
}

func finished(j *batchv1.Job) bool {
	return slices.ContainsFunc(j.Status.Conditions, func(c batchv1.JobCondition) bool {
		return (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue
	})
}

// containerImage is an image a pod spec names, as written, and the
// container or image volume naming it: "containers/web",
// "initContainers/setup", "volumes/models".
type containerImage struct {
	Image, Container string
}

// imagesOf lists the images of a pod spec's init, regular and ephemeral
// containers, and of its image volumes (the kubelet pulls those too, before
// the pod starts).
func imagesOf(spec *corev1.PodSpec) []containerImage {
	var out []containerImage
	for _, c := range spec.InitContainers {
		out = append(out, containerImage{c.Image, "initContainers/" + c.Name})
	}
	for _, c := range spec.Containers {
		out = append(out, containerImage{c.Image, "containers/" + c.Name})
	}
	for _, c := range spec.EphemeralContainers {
		out = append(out, containerImage{c.Image, "ephemeralContainers/" + c.Name})
	}
	for _, v := range spec.Volumes {
		if v.Image != nil {
			out = append(out, containerImage{v.Image.Reference, "volumes/" + v.Name})
		}
	}
	return out
}

// mayRunOn says whether a pod of spec could be scheduled on the node named
// node with labels (workload.Placement.MayRunOn).
func mayRunOn(spec *corev1.PodSpec, node string, labels map[string]string) bool {
	return placementOf(spec).MayRunOn(node, labels)
}

// placementOf is a pod spec's placement as the workload package judges it.
func placementOf(spec *corev1.PodSpec) *workload.Placement {
	p := &workload.Placement{NodeName: spec.NodeName, NodeSelector: spec.NodeSelector}
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			term := workload.Term{Fields: len(t.MatchFields) > 0}
			for _, e := range t.MatchExpressions {
				term.Exprs = append(term.Exprs, workload.Expr{Key: e.Key, Operator: string(e.Operator), Values: e.Values})
			}
			p.Terms = append(p.Terms, term)
		}
	}
	return p
}

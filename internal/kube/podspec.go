package kube

import (
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// workload is an object with a pod spec: its kind, namespace and name, and
// the spec.
type workload struct {
	Kind, Namespace, Name string
	Spec                  *corev1.PodSpec
}

// workloadOf returns the pod spec of a Pod or of a workload object (a
// CronJob's is that of its job template). ok is false for any other object,
// and for objects whose own owner's template stands for them: a ReplicaSet
// of a Deployment, a Job of a CronJob (their older revisions keep images no
// longer used), and a Job that has finished (it starts no pod again).
func workloadOf(obj any) (w workload, ok bool) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return workload{"Pod", o.Namespace, o.Name, &o.Spec}, true
	case *appsv1.Deployment:
		return workload{"Deployment", o.Namespace, o.Name, &o.Spec.Template.Spec}, true
	case *appsv1.StatefulSet:
		return workload{"StatefulSet", o.Namespace, o.Name, &o.Spec.Template.Spec}, true
	case *appsv1.DaemonSet:
		return workload{"DaemonSet", o.Namespace, o.Name, &o.Spec.Template.Spec}, true
	case *appsv1.ReplicaSet:
		if ownedBy(o.OwnerReferences, "Deployment") {
			return workload{}, false
		}
		return workload{"ReplicaSet", o.Namespace, o.Name, &o.Spec.Template.Spec}, true
	case *batchv1.Job:
		if ownedBy(o.OwnerReferences, "CronJob") || finished(o) {
			return workload{}, false
		}
		return workload{"Job", o.Namespace, o.Name, &o.Spec.Template.Spec}, true
	case *batchv1.CronJob:
		return workload{"CronJob", o.Namespace, o.Name, &o.Spec.JobTemplate.Spec.Template.Spec}, true
	case *corev1.ReplicationController:
		if o.Spec.Template == nil {
			return workload{}, false
		}
		return workload{"ReplicationController", o.Namespace, o.Name, &o.Spec.Template.Spec}, true
	}
	return workload{}, false
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
// container naming it: "containers/web", "initContainers/setup".
type containerImage struct {
	Image, Container string
}

// imagesOf lists the images of a pod spec's init, regular and ephemeral
// containers.
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
	return out
}

// mayRunOn says whether a pod of spec could be scheduled on the node named
// node with labels: its nodeName, its nodeSelector and its required node
// affinity. What it cannot judge (labels unknown, Gt and Lt, matchFields, an
// operator it does not know) counts as a match. Taints are not judged.
func mayRunOn(spec *corev1.PodSpec, node string, labels map[string]string) bool {
	if spec.NodeName != "" {
		return spec.NodeName == node
	}
	if labels == nil {
		return true
	}
	for k, v := range spec.NodeSelector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	terms := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return true // the API refuses it; not judged
	}
	return slices.ContainsFunc(terms, func(t corev1.NodeSelectorTerm) bool { return termMayMatch(t, labels) })
}

// termMayMatch: every expression of the term may hold. An empty term
// matches no node, as the scheduler has it.
func termMayMatch(t corev1.NodeSelectorTerm, labels map[string]string) bool {
	if len(t.MatchExpressions) == 0 && len(t.MatchFields) == 0 {
		return false
	}
	for _, e := range t.MatchExpressions {
		v, has := labels[e.Key]
		switch e.Operator {
		case corev1.NodeSelectorOpIn:
			if !has || !slices.Contains(e.Values, v) {
				return false
			}
		case corev1.NodeSelectorOpNotIn:
			if has && slices.Contains(e.Values, v) {
				return false
			}
		case corev1.NodeSelectorOpExists:
			if !has {
				return false
			}
		case corev1.NodeSelectorOpDoesNotExist:
			if has {
				return false
			}
		}
	}
	return true
}

package reporter

// What the sets watcher and the leader both read of the ImageSets and the
// NodeImages, through the dynamic client, and how the caches keep them small.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/holdfast-project/holdfast/internal/imageset"
	"github.com/holdfast-project/holdfast/internal/report"
)

// The resources the sets watcher and the leader read.
var (
	imageSetsGVR  = schema.GroupVersionResource{Group: report.Group, Version: report.Version, Resource: imageset.Resource}
	nodeImagesGVR = schema.GroupVersionResource{Group: report.Group, Version: report.Version, Resource: report.Resource}
)

// setsDebounce is how long changes of the sets and the NodeImages gather
// before the sets are sent to the agent, or the statuses written.
const setsDebounce = 250 * time.Millisecond

// onlySets keeps of a NodeImages object its name and its sets: what the
// waves and the statuses read (what the node holds, packed, can be large,
// and every reporter caches every node's).
func onlySets(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := &unstructured.Unstructured{Object: map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind()}}
	out.SetName(u.GetName())
	out.SetResourceVersion(u.GetResourceVersion())
	if sets, ok := u.Object["sets"]; ok {
		out.Object["sets"] = sets
	}
	return out, nil
}

// onlyLabels keeps of a Node its name and labels.
func onlyLabels(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels, ResourceVersion: n.ResourceVersion}}, nil
}

// setInformers are the cluster-wide informers of the ImageSets and of the
// NodeImages (their sets only), handler called on every change.
func setInformers(client dynamic.Interface, handler cache.ResourceEventHandler) (dynamicinformer.DynamicSharedInformerFactory, []cache.SharedIndexInformer, error) {
	f := dynamicinformer.NewDynamicSharedInformerFactory(client, 0)
	sets := f.ForResource(imageSetsGVR).Informer()
	nodes := f.ForResource(nodeImagesGVR).Informer()
	if err := sets.SetTransform(strip); err != nil {
		return nil, nil, err
	}
	if err := nodes.SetTransform(onlySets); err != nil {
		return nil, nil, err
	}
	for _, inf := range []cache.SharedIndexInformer{sets, nodes} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return nil, nil, err
		}
	}
	return f, []cache.SharedIndexInformer{sets, nodes}, nil
}

// decodeSet is the ImageSet of a cached object.
func decodeSet(obj any) (imageset.ImageSet, error) {
	var set imageset.ImageSet
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return set, fmt.Errorf("an ImageSet of type %T", obj)
	}
	data, err := json.Marshal(u.Object)
	if err == nil {
		err = json.Unmarshal(data, &set)
	}
	if err != nil {
		return set, fmt.Errorf("decoding ImageSet %s: %w", u.GetName(), err)
	}
	return set, nil
}

// cachedSets are the ImageSets of the store, sorted by name, with the
// objects they came from; the ones that do not decode are named in bad.
func cachedSets(store cache.Store) (sets []imageset.ImageSet, objs []*unstructured.Unstructured, bad []string) {
	list := store.List()
	slices.SortFunc(list, func(a, b any) int { return strings.Compare(nameOf(a), nameOf(b)) })
	for _, o := range list {
		set, err := decodeSet(o)
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		sets = append(sets, set)
		objs = append(objs, o.(*unstructured.Unstructured))
	}
	return sets, objs, bad
}

// cachedNodes are the nodes of the NodeImages in store, sorted by name,
// each with the sets its agent reports and labels(name) (nil: unknown).
func cachedNodes(store cache.Store, labels func(string) map[string]string) []imageset.Node {
	var out []imageset.Node
	for _, o := range store.List() {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		n := imageset.Node{Name: u.GetName(), Labels: labels(u.GetName())}
		if raw, ok := u.Object["sets"]; ok {
			// A NodeImages whose sets do not decode says nothing of them.
			if data, err := json.Marshal(raw); err == nil {
				_ = json.Unmarshal(data, &n.Sets)
			}
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b imageset.Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func nameOf(o any) string {
	if m, ok := o.(metav1.Object); ok {
		return m.GetName()
	}
	return ""
}

package reporter

// What the sets watcher and the leader both read of the ImageSets and the
// NodeImages: one pair of caches per reporter process, which both share,
// each object in them decoded once, when it changed.

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
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

// setCaches are a reporter process's informers of the ImageSets and of
// every node's NodeImages (their sets only, as nodeSets), shared by its
// sets watcher and its leader: the NodeImages are listed and kept once.
type setCaches struct {
	sets, nodes cache.SharedIndexInformer
}

// newSetCaches makes the informers: the ImageSets through dyn, the
// NodeImages through client's REST client (nodeSetsSource).
func newSetCaches(client kubernetes.Interface, dyn dynamic.Interface) *setCaches {
	sets := dynamicinformer.NewFilteredDynamicInformer(dyn, imageSetsGVR, "", 0, cache.Indexers{}, nil).Informer()
	_ = sets.SetTransform(decodeCachedSet) // it fails only once the informer has started
	nodes := cache.NewSharedIndexInformer(nodeSetsSource(client, dyn), &nodeSets{}, 0, cache.Indexers{})
	return &setCaches{sets: sets, nodes: nodes}
}

// run runs the informers until ctx ends.
func (c *setCaches) run(ctx context.Context) {
	done := make(chan struct{})
	go func() { defer close(done); c.nodes.RunWithContext(ctx) }()
	c.sets.RunWithContext(ctx)
	<-done
}

// synced waits until both caches hold what the API server had when they
// started; false when ctx ended first.
func (c *setCaches) synced(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), c.sets.HasSynced, c.nodes.HasSynced)
}

// watch sends on ch, without blocking, on every change of either cache
// (and once for each object they hold) but the updates of an ImageSet that
// ignore says nothing of, until the returned remove is called.
func (c *setCaches) watch(ch chan struct{}, ignore func(oldSet, newSet *cachedSet) bool) (remove func(), err error) {
	handler := notifier(ch)
	sets, err := c.sets.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: handler.AddFunc, DeleteFunc: handler.DeleteFunc,
		UpdateFunc: func(oldObj, newObj any) {
			o, ok := oldObj.(*cachedSet)
			n, isSet := newObj.(*cachedSet)
			if !ok || !isSet || !ignore(o, n) {
				handler.UpdateFunc(oldObj, newObj)
			}
		}})
	if err != nil {
		return nil, err
	}
	nodes, err := c.nodes.AddEventHandler(handler)
	if err != nil {
		_ = c.sets.RemoveEventHandler(sets)
		return nil, err
	}
	return func() { _ = c.sets.RemoveEventHandler(sets); _ = c.nodes.RemoveEventHandler(nodes) }, nil
}

// notifier is a handler sending on ch, without blocking, on every change.
func notifier(ch chan struct{}) cache.ResourceEventHandlerFuncs {
	notify := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: func(any) { notify() }, UpdateFunc: func(any, any) { notify() }, DeleteFunc: func(any) { notify() }}
}

// cachedSet is an ImageSet as the cache keeps it: decoded once, when it
// changed, beside the object it came from (its managed fields and
// annotations dropped), which a status write starts from; or why it does
// not decode.
type cachedSet struct {
	metav1.ObjectMeta // the object's name and resourceVersion
	set               imageset.ImageSet
	obj               *unstructured.Unstructured
	err               error
}

func (s *cachedSet) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (s *cachedSet) DeepCopyObject() runtime.Object {
	set := s.set
	set.Spec.Images = slices.Clone(set.Spec.Images)
	return &cachedSet{ObjectMeta: *s.ObjectMeta.DeepCopy(), set: set, obj: s.obj.DeepCopy(), err: s.err}
}

// statusOnly reports whether an update of an ImageSet changed its status
// alone (and what the sets watcher and the leader do not read of it):
// the spec and the generation are the same.
func statusOnly(o, n *cachedSet) bool {
	return o.err == nil && n.err == nil && o.set.Metadata.Generation == n.set.Metadata.Generation && reflect.DeepEqual(o.set.Spec, n.set.Spec)
}

// decodeCachedSet is the informer's transform of an ImageSet: a
// cachedSet.
func decodeCachedSet(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a cachedSet already, or a tombstone
	}
	u.SetManagedFields(nil)
	u.SetAnnotations(nil)
	set, err := decodeSet(u)
	return &cachedSet{ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), ResourceVersion: u.GetResourceVersion()}, set: set, obj: u, err: err}, nil
}

// decodeSet is the ImageSet of an object.
func decodeSet(u *unstructured.Unstructured) (imageset.ImageSet, error) {
	var set imageset.ImageSet
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
	var list []*cachedSet
	for _, o := range store.List() {
		if s, ok := o.(*cachedSet); ok {
			list = append(list, s)
		}
	}
	slices.SortFunc(list, func(a, b *cachedSet) int { return strings.Compare(a.Name, b.Name) })
	for _, s := range list {
		if s.err != nil {
			bad = append(bad, s.err.Error())
			continue
		}
		sets = append(sets, s.set)
		objs = append(objs, s.obj)
	}
	return sets, objs, bad
}

// cachedNodes are the nodes of the NodeImages in store, sorted by name,
// each with the sets its agent reports (the cache's own: read only) and
// labels(name) (nil: unknown).
func cachedNodes(store cache.Store, labels func(string) map[string]string) []imageset.Node {
	list := store.List()
	out := make([]imageset.Node, 0, len(list))
	for _, o := range list {
		if n, ok := o.(*nodeSets); ok {
			out = append(out, imageset.Node{Name: n.Name, Labels: labels(n.Name), Sets: n.Sets, PeerMirror: n.PeerMirror})
		}
	}
	slices.SortFunc(out, func(a, b imageset.Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// onlyLabels keeps of a Node its name and labels.
func onlyLabels(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels, ResourceVersion: n.ResourceVersion}}, nil
}

package reporter

// What a reporter keeps of every node's NodeImages: the sets only, each
// object decoded once, as it streams from the API server, into a compact
// typed object (the objects are 70 KB each, mostly what the node holds,
// and every reporter keeps every node's).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"unique"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/holdfast-project/holdfast/internal/kubeapi"
	"github.com/holdfast-project/holdfast/internal/report"
)

// nodeSets is a node's NodeImages as the caches keep it: its name and
// resourceVersion, what its agent says of the sets, and the peer mirror
// its peers fetch from. Its strings are interned: the nodes name the same
// images, phases and errors.
type nodeSets struct {
	metav1.ObjectMeta // Name and ResourceVersion (and a bookmark's annotation) only
	Sets              []report.SetState
	PeerMirror        string
}

func (n *nodeSets) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (n *nodeSets) DeepCopyObject() runtime.Object {
	out := &nodeSets{ObjectMeta: *n.ObjectMeta.DeepCopy(), Sets: slices.Clone(n.Sets), PeerMirror: n.PeerMirror}
	for i := range out.Sets {
		out.Sets[i].Images = slices.Clone(out.Sets[i].Images)
	}
	return out
}

// nodeSetsList is a page of the list of the NodeImages, as nodeSets.
type nodeSetsList struct {
	metav1.ListMeta
	Items []*nodeSets
}

func (l *nodeSetsList) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (l *nodeSetsList) DeepCopyObject() runtime.Object {
	out := &nodeSetsList{ListMeta: *l.ListMeta.DeepCopy()}
	for _, n := range l.Items {
		out.Items = append(out.Items, n.DeepCopyObject().(*nodeSets))
	}
	return out
}

// nodeSetsJSON is what decodeNodeSets reads of a NodeImages object: the
// other fields are skipped, never decoded.
type nodeSetsJSON struct {
	Metadata struct {
		Name            string            `json:"name"`
		ResourceVersion string            `json:"resourceVersion"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
	Sets       []report.SetState `json:"sets"`
	PeerMirror string            `json:"peerMirror"`
}

// decodeNodeSets is the nodeSets of a NodeImages object (JSON): an object
// whose sets do not decode says nothing of them; one whose metadata does
// not is an error. named says the object must have a name (all but a
// watch's bookmark).
func decodeNodeSets(data []byte, named bool) (*nodeSets, error) {
	var in nodeSetsJSON
	if err := json.Unmarshal(data, &in); err != nil {
		in.Sets = nil
		var meta struct {
			Metadata json.RawMessage `json:"metadata"`
		}
		if json.Unmarshal(data, &meta) != nil || json.Unmarshal(meta.Metadata, &in.Metadata) != nil {
			return nil, fmt.Errorf("decoding a NodeImages object: %w", err)
		}
	}
	if named && in.Metadata.Name == "" {
		return nil, fmt.Errorf("a NodeImages object without a name")
	}
	n := &nodeSets{ObjectMeta: metav1.ObjectMeta{Name: in.Metadata.Name, ResourceVersion: in.Metadata.ResourceVersion}, Sets: intern(in.Sets),
		PeerMirror: in.PeerMirror}
	if v, ok := in.Metadata.Annotations[metav1.InitialEventsAnnotationKey]; ok {
		n.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: v}
	}
	return n, nil
}

// intern gives the strings of sets their canonical copies, and the slices
// their length as capacity.
func intern(sets []report.SetState) []report.SetState {
	if len(sets) == 0 {
		return nil
	}
	sets = slices.Clone(sets)
	for i := range sets {
		s := &sets[i]
		s.Name = unique.Make(s.Name).Value()
		s.Images = slices.Clone(s.Images)
		for j := range s.Images {
			img := &s.Images[j]
			img.Ref = unique.Make(img.Ref).Value()
			img.Phase = report.SetPhase(unique.Make(string(img.Phase)).Value())
			if img.Error != "" {
				img.Error = unique.Make(img.Error).Value()
			}
		}
	}
	return sets
}

// nodeSetsSource is how the NodeImages are listed and watched: through
// client's REST client, each object read as it streams straight into a
// nodeSets; or, for a client that has none (a fake clientset), through
// dyn, each object converted.
func nodeSetsSource(client kubernetes.Interface, dyn dynamic.Interface) cache.ListerWatcher {
	if rc, ok := client.CoreV1().RESTClient().(*rest.RESTClient); ok && rc != nil {
		return restNodeSets(rc)
	}
	return dynamicNodeSets(dyn)
}

// restNodeSets lists and watches the NodeImages through rc as JSON, each
// object decoded once, as it comes, into a nodeSets.
func restNodeSets(rc rest.Interface) cache.ListerWatcher {
	get := func(opts *metav1.ListOptions) *rest.Request {
		return rc.Get().AbsPath(report.NodeImagesPath).VersionedParams(opts, scheme.ParameterCodec).SetHeader("Accept", "application/json")
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			body, err := get(&opts).Stream(ctx)
			if err != nil {
				return nil, err
			}
			defer body.Close()
			list := &nodeSetsList{}
			list.ListMeta, err = kubeapi.ReadPage(body, func(item []byte) error {
				n, err := decodeNodeSets(item, true)
				if err != nil {
					return err
				}
				list.Items = append(list.Items, n)
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("listing %s: %w", report.NodeImagesPath, err)
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch = true
			body, err := get(&opts).Stream(ctx)
			if err != nil {
				return nil, err
			}
			return watch.NewStreamWatcher(&eventDecoder{dec: json.NewDecoder(body), body: body},
				apierrors.NewClientErrorReporter(http.StatusInternalServerError, http.MethodGet, "ClientWatchDecoding")), nil
		},
	}
}

// eventDecoder reads the events of a watch of the NodeImages (JSON, one
// after the other), each object into a nodeSets.
type eventDecoder struct {
	dec  *json.Decoder
	body io.ReadCloser
}

func (d *eventDecoder) Decode() (watch.EventType, runtime.Object, error) {
	var ev struct {
		Type   watch.EventType `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if err := d.dec.Decode(&ev); err != nil {
		return "", nil, err
	}
	switch ev.Type {
	case watch.Error:
		var st metav1.Status
		if err := json.Unmarshal(ev.Object, &st); err != nil {
			return "", nil, fmt.Errorf("decoding a watch's error: %w", err)
		}
		return ev.Type, &st, nil
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
		n, err := decodeNodeSets(ev.Object, ev.Type != watch.Bookmark)
		if err != nil {
			return "", nil, err
		}
		return ev.Type, n, nil
	}
	return "", nil, fmt.Errorf("a watch event of type %q", ev.Type)
}

func (d *eventDecoder) Close() { _ = d.body.Close() }

// dynamicNodeSets lists and watches the NodeImages through dyn, each
// object converted into a nodeSets.
func dynamicNodeSets(dyn dynamic.Interface) cache.ListerWatcher {
	res := dyn.Resource(nodeImagesGVR)
	convert := func(o runtime.Object, named bool) (*nodeSets, error) {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return nil, fmt.Errorf("a NodeImages object of type %T", o)
		}
		data, err := u.MarshalJSON()
		if err != nil {
			return nil, err
		}
		return decodeNodeSets(data, named)
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			ul, err := res.List(ctx, opts)
			if err != nil {
				return nil, err
			}
			list := &nodeSetsList{ListMeta: metav1.ListMeta{ResourceVersion: ul.GetResourceVersion(), Continue: ul.GetContinue()}}
			for i := range ul.Items {
				n, err := convert(&ul.Items[i], true)
				if err != nil {
					return nil, err
				}
				list.Items = append(list.Items, n)
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := res.Watch(ctx, opts)
			if err != nil {
				return nil, err
			}
			return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
				if ev.Type == watch.Error {
					return ev, true
				}
				n, err := convert(ev.Object, ev.Type != watch.Bookmark)
				if err != nil {
					return watch.Event{Type: watch.Error, Object: &apierrors.NewInternalError(err).ErrStatus}, true
				}
				ev.Object = n
				return ev, true
			}), nil
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, dyn)
}

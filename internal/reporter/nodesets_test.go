package reporter

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/holdfast-project/holdfast/internal/report"
)

// nodeImagesJSON is node's NodeImages as the API server serves it: with
// what it holds (which the caches never decode), managed fields, and sets
// (raw JSON; "": none).
func nodeImagesJSON(node, rv, sets string) string {
	obj := fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"metadata":{"name":%q,"resourceVersion":%q,"uid":"u-%s",`+
		`"managedFields":[{"manager":"holdfast-reporter","operation":"Apply","fieldsV1":{"f:held":{}}}]},"images":2,"held":"aGVsZA==",`+
		`"required":{"known":true},"peerMirror":"https://%s:30020"`, report.APIVersion, report.Kind, node, rv, node, node)
	if sets != "" {
		obj += `,"sets":` + sets
	}
	return obj + "}"
}

// setsJSON is the sets of one set, release, its images in phases.
func setsJSON(phases ...string) string {
	var imgs []string
	for i, p := range phases {
		imgs = append(imgs, fmt.Sprintf(`{"ref":"docker.io/library/app-%d:1","phase":%q}`, i, p))
	}
	return `[{"name":"release","generation":2,"selected":true,"images":[` + strings.Join(imgs, ",") + `]}]`
}

// apiServer stands for the API server's NodeImages: two pages of a list,
// and a watch that sends what the test hands it.
type apiServer struct {
	srv    *httptest.Server
	events chan string // watch events (JSON) to send; closed: the watch ends
	mu     sync.Mutex
	asked  []string // the queries, in order
}

func newAPIServer(t *testing.T) *apiServer {
	a := &apiServer{events: make(chan string, 16)}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != report.NodeImagesPath {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		a.mu.Lock()
		a.asked = append(a.asked, r.URL.RawQuery)
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case q.Get("watch") == "true":
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			for {
				select {
				case ev, ok := <-a.events:
					if !ok {
						return
					}
					fmt.Fprintln(w, ev)
					w.(http.Flusher).Flush()
				case <-r.Context().Done():
					return
				}
			}
		case q.Get("continue") == "":
			fmt.Fprintf(w, `{"kind":"NodeImagesList","metadata":{"continue":"page-2","resourceVersion":"9"},"items":[%s,%s]}`,
				nodeImagesJSON("n1", "5", setsJSON("Held", "Waiting")), nodeImagesJSON("n2", "6", `"not a list"`))
		default:
			fmt.Fprintf(w, `{"metadata":{"resourceVersion":"9"},"items":[%s]}`, nodeImagesJSON("n3", "7", ""))
		}
	}))
	t.Cleanup(func() { a.srv.CloseClientConnections(); a.srv.Close() })
	return a
}

// queries are the requests' queries, in order.
func (a *apiServer) queries() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.asked...)
}

func (a *apiServer) client(t *testing.T) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(&rest.Config{Host: a.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func event(typ watch.EventType, obj string) string {
	return fmt.Sprintf(`{"type":%q,"object":%s}`, typ, obj)
}

// The NodeImages through the REST client: each page's items decoded into
// their sets alone, the list's continue and resourceVersion kept, a node
// whose sets do not decode kept with none; the strings the nodes share
// stored once.
func TestNodeSetsList(t *testing.T) {
	a := newAPIServer(t)
	lw := cache.ToListerWatcherWithContext(nodeSetsSource(a.client(t), nil))
	obj, err := lw.ListWithContext(context.Background(), metav1.ListOptions{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	page := obj.(*nodeSetsList)
	if page.Continue != "page-2" || page.ResourceVersion != "9" || len(page.Items) != 2 {
		t.Fatalf("page 1: %+v", page)
	}
	n1, n2 := page.Items[0], page.Items[1]
	if n1.Name != "n1" || n1.ResourceVersion != "5" || len(n1.Sets) != 1 || n1.Sets[0].Name != "release" || n1.Sets[0].Generation != 2 ||
		len(n1.Sets[0].Images) != 2 || n1.Sets[0].Images[1] != (report.SetImage{Ref: "docker.io/library/app-1:1", Phase: report.SetWaiting}) {
		t.Errorf("n1: %+v", n1)
	}
	if n1.PeerMirror != "https://n1:30020" {
		t.Errorf("n1's peer mirror: %q", n1.PeerMirror)
	}
	if n1.ManagedFields != nil || n1.UID != "" {
		t.Errorf("n1 kept more of its metadata than its name and resourceVersion: %+v", n1.ObjectMeta)
	}
	if n2.Name != "n2" || n2.Sets != nil {
		t.Errorf("n2, whose sets do not decode: %+v, want kept without sets", n2)
	}
	obj, err = lw.ListWithContext(context.Background(), metav1.ListOptions{Limit: 2, Continue: page.Continue})
	if err != nil {
		t.Fatal(err)
	}
	if page := obj.(*nodeSetsList); page.Continue != "" || len(page.Items) != 1 || page.Items[0].Name != "n3" || page.Items[0].Sets != nil {
		t.Errorf("page 2: %+v", page)
	}
	if q := a.queries()[0]; !strings.Contains(q, "limit=2") {
		t.Errorf("the first list asked %q, want its limit", q)
	}

	// Two nodes naming the same image: one copy of the reference.
	x, err := decodeNodeSets([]byte(nodeImagesJSON("x", "1", setsJSON("Held"))), true)
	if err != nil {
		t.Fatal(err)
	}
	if unsafe.StringData(x.Sets[0].Images[0].Ref) != unsafe.StringData(n1.Sets[0].Images[0].Ref) {
		t.Errorf("the same reference of two nodes is held twice")
	}
	if _, err := decodeNodeSets([]byte(`{"metadata":{"resourceVersion":"3"},"sets":[]}`), true); err == nil {
		t.Errorf("a NodeImages without a name decoded")
	}
}

// A watch of the NodeImages through the REST client: each event's object
// decoded into a nodeSets, a bookmark's resourceVersion and the annotation
// that ends a list's initial events kept, an error the API server's Status.
func TestNodeSetsWatch(t *testing.T) {
	a := newAPIServer(t)
	lw := cache.ToListerWatcherWithContext(nodeSetsSource(a.client(t), nil))
	w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "9", AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	a.events <- event(watch.Added, nodeImagesJSON("n4", "10", setsJSON("Pulling")))
	a.events <- event(watch.Modified, nodeImagesJSON("n1", "11", setsJSON("Held", "Held")))
	a.events <- event(watch.Deleted, nodeImagesJSON("n2", "12", ""))
	a.events <- event(watch.Bookmark, `{"metadata":{"resourceVersion":"13","annotations":{"k8s.io/initial-events-end":"true"}}}`)
	a.events <- event(watch.Error, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410,"message":"too old"}`)
	want := []string{"ADDED n4 10 Pulling", "MODIFIED n1 11 Held", "DELETED n2 12 ", "BOOKMARK  13 "}
	for i, wanted := range want {
		ev, ok := <-w.ResultChan()
		if !ok {
			t.Fatalf("the watch ended after %d events", i)
		}
		n, isNodeSets := ev.Object.(*nodeSets)
		if !isNodeSets {
			t.Fatalf("event %d: %s of %T", i, ev.Type, ev.Object)
		}
		phase := ""
		if len(n.Sets) > 0 {
			phase = string(n.Sets[0].Images[0].Phase)
		}
		if got := fmt.Sprintf("%s %s %s %s", ev.Type, n.Name, n.ResourceVersion, phase); got != wanted {
			t.Errorf("event %d: %q, want %q", i, got, wanted)
		}
		if ev.Type == watch.Bookmark && n.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
			t.Errorf("the bookmark lost its annotation: %+v", n.ObjectMeta)
		}
	}
	ev := <-w.ResultChan()
	if err := apierrors.FromObject(ev.Object); ev.Type != watch.Error || !apierrors.IsResourceExpired(err) {
		t.Errorf("the error event: %s %v (%T)", ev.Type, err, ev.Object)
	}
	if q := a.queries()[0]; !strings.Contains(q, "watch=true") || !strings.Contains(q, "resourceVersion=9") || !strings.Contains(q, "allowWatchBookmarks=true") {
		t.Errorf("the watch asked %q", q)
	}
}

// The caches over a real REST client: the NodeImages listed as a watch's
// initial events (client-go's streaming lists), then kept up to date.
func TestSetCachesOverREST(t *testing.T) {
	a := newAPIServer(t)
	a.events <- event(watch.Added, nodeImagesJSON("n1", "5", setsJSON("Waiting")))
	a.events <- event(watch.Added, nodeImagesJSON("n2", "6", setsJSON("Held")))
	a.events <- event(watch.Bookmark, `{"metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}`)
	c := newSetCaches(a.client(t), newDynamic(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.run(ctx) }()
	defer func() { cancel(); <-done }()
	syncCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	if !c.synced(syncCtx) {
		t.Fatalf("the caches did not sync in 30 s; the requests: %q", a.queries())
	}
	phases := func() string {
		var out []string
		for _, n := range cachedNodes(c.nodes.GetStore(), func(string) map[string]string { return nil }) {
			out = append(out, n.Name+" "+string(n.Sets[0].Images[0].Phase))
		}
		return strings.Join(out, ", ")
	}
	if got := phases(); got != "n1 Waiting, n2 Held" {
		t.Fatalf("synced: %q", got)
	}
	a.events <- event(watch.Modified, nodeImagesJSON("n1", "10", setsJSON("Held")))
	waitTrue(t, "n1's change in the cache", func() bool { return phases() == "n1 Held, n2 Held" })
	if q := a.queries(); !strings.Contains(q[0], "sendInitialEvents=true") {
		t.Errorf("the caches' first request %q, want a watch with the initial events (of %q)", q[0], q)
	}
}

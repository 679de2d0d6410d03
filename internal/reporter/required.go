package reporter

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/holdfast-project/holdfast/internal/pattern"
	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/units"
)

// shownUsers is how many users of an image the set names; a last entry
// counts the others.
const shownUsers = 5

// requiredWatcher watches the API server for what the node's workloads
// need and sends that set to the agent (PUT /required) whenever it changes,
// and again when the agent says it has none.
type requiredWatcher struct {
	client kubernetes.Interface
	cfg    Config
	log    *slog.Logger
	http   *http.Client
	token  *agentToken

	changed chan struct{} // an object was added, changed or deleted
	resend  chan struct{} // the agent has no set: send it again

	informers []cache.SharedIndexInformer
	node      cache.SharedIndexInformer // this Node, for its labels; nil without ClusterWorkloads
	sent      []byte                    // the body of the last PUT the agent took
}

func newRequiredWatcher(client kubernetes.Interface, cfg Config, log *slog.Logger, hc *http.Client) *requiredWatcher {
	return &requiredWatcher{client: client, cfg: cfg, log: log, http: hc, token: &agentToken{path: cfg.TokenFile},
		changed: make(chan struct{}, 1), resend: make(chan struct{}, 1)}
}

// askResend asks for the set to be sent again, without waiting.
func (w *requiredWatcher) askResend() {
	select {
	case w.resend <- struct{}{}:
	default:
	}
}

func (w *requiredWatcher) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// strip drops what the watcher never reads and can be large (the managed
// fields, kubectl's last-applied annotation), to keep the caches small.
func strip(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
		o.SetAnnotations(nil)
	}
	return obj, nil
}

// start makes the informers: the Pods bound to this node, and with
// ClusterWorkloads the workloads of the whole cluster and this Node.
func (w *requiredWatcher) start(ctx context.Context) []informers.SharedInformerFactory {
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.notify() },
		UpdateFunc: func(any, any) { w.notify() },
		DeleteFunc: func(any) { w.notify() },
	}
	add := func(inf cache.SharedIndexInformer) {
		if _, err := inf.AddEventHandler(handler); err != nil {
			w.log.Warn("adding a handler to an informer that stopped", "error", err)
		}
		w.informers = append(w.informers, inf)
	}
	pods := informers.NewSharedInformerFactoryWithOptions(w.client, 0, informers.WithTransform(strip),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=" + w.cfg.Node }))
	add(pods.Core().V1().Pods().Informer())
	factories := []informers.SharedInformerFactory{pods}
	if w.cfg.ClusterWorkloads {
		all := informers.NewSharedInformerFactoryWithOptions(w.client, 0, informers.WithTransform(strip))
		add(all.Apps().V1().Deployments().Informer())
		add(all.Apps().V1().StatefulSets().Informer())
		add(all.Apps().V1().DaemonSets().Informer())
		add(all.Apps().V1().ReplicaSets().Informer())
		add(all.Batch().V1().Jobs().Informer())
		add(all.Batch().V1().CronJobs().Informer())
		add(all.Core().V1().ReplicationControllers().Informer())
		nodes := informers.NewSharedInformerFactoryWithOptions(w.client, 0, informers.WithTransform(strip),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + w.cfg.Node }))
		w.node = nodes.Core().V1().Nodes().Informer()
		add(w.node)
		factories = append(factories, all, nodes)
	}
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	return factories
}

// run watches until ctx ends. The first set goes to the agent once every
// informer has synced; then a change is sent after the debounce, a set the
// agent did not take after the interval, and the set again when asked.
func (w *requiredWatcher) run(ctx context.Context) {
	factories := w.start(ctx)
	defer func() {
		for _, f := range factories {
			f.Shutdown()
		}
	}()
	synced := make([]cache.InformerSynced, 0, len(w.informers))
	for _, inf := range w.informers {
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	w.log.Info("watching the workloads for the images this node needs", "node", w.cfg.Node, "clusterWorkloads", w.cfg.ClusterWorkloads)
	loop := sendLoop{what: "the required images", agent: w.cfg.Agent, log: w.log, changed: w.changed, resend: w.resend,
		debounce: w.cfg.Debounce, interval: w.cfg.Interval, send: w.send}
	loop.run(ctx, true)
}

// send PUTs the set when it differs from what the agent took last, or when
// forced.
func (w *requiredWatcher) send(ctx context.Context, force bool) error {
	set := w.set()
	body, err := json.Marshal(set)
	if err != nil {
		return fmt.Errorf("encoding the required images: %w", err)
	}
	if !force && bytes.Equal(body, w.sent) {
		return nil
	}
	w.sent = nil
	if err := putRequired(ctx, w.http, w.cfg.Agent, w.token, body); err != nil {
		return err
	}
	w.sent = body
	w.log.Info("sent the required images to the agent", "images", len(set.Images))
	return nil
}

// set is the set as the caches hold it now.
func (w *requiredWatcher) set() report.RequiredSet {
	var labels map[string]string
	if w.node != nil {
		for _, o := range w.node.GetStore().List() {
			if n, ok := o.(*corev1.Node); ok && n.Name == w.cfg.Node {
				labels = n.Labels
				if labels == nil {
					labels = map[string]string{}
				}
			}
		}
	}
	var objs []any
	for _, inf := range w.informers {
		if inf != w.node {
			objs = append(objs, inf.GetStore().List()...)
		}
	}
	return requiredSet(objs, w.cfg.Node, labels, w.log)
}

// requiredSet is the set of images the objects need on the node named node
// with labels (nil: unknown): every Pod bound to it, and every workload
// that may run there. A reference that does not parse is left out.
func requiredSet(objs []any, node string, labels map[string]string, log *slog.Logger) report.RequiredSet {
	users := map[string][]string{}
	for _, o := range objs {
		wl, ok := workloadOf(o)
		if !ok {
			continue
		}
		if wl.Kind == "Pod" {
			if wl.Spec.NodeName != node {
				continue
			}
		} else if !mayRunOn(wl.Spec, node, labels) {
			continue
		}
		for _, ci := range imagesOf(wl.Spec) {
			user := fmt.Sprintf("%s %s/%s %s", wl.Kind, wl.Namespace, wl.Name, ci.Container)
			ref, err := pattern.NormalizeRef(ci.Image)
			if err != nil {
				log.Debug("an image reference that does not parse", "usedBy", user, "error", err)
				continue
			}
			users[ref] = append(users[ref], user)
		}
	}
	set := report.RequiredSet{Images: make([]report.RequiredImage, 0, len(users))}
	for _, ref := range slices.Sorted(maps.Keys(users)) {
		u := users[ref]
		slices.SortFunc(u, func(a, b string) int {
			return cmp.Or(cmp.Compare(kindRank(a), kindRank(b)), cmp.Compare(a, b))
		})
		u = slices.Compact(u)
		if more := len(u) - shownUsers; more > 0 {
			u = append(u[:shownUsers:shownUsers], units.Rest(more))
		}
		set.Images = append(set.Images, report.RequiredImage{Ref: ref, UsedBy: u})
	}
	return set
}

// kindRank puts the workloads a person edits before the Pods they make.
func kindRank(user string) int {
	if strings.HasPrefix(user, "Pod ") {
		return 1
	}
	return 0
}

package reporter

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/holdfast-project/holdfast/internal/imageset"
	"github.com/holdfast-project/holdfast/internal/report"
)

// setsWatcher watches the ImageSets, every node's NodeImages and this
// node's labels, and sends the agent every set (PUT /sets) with whether it
// selects the node and which of its images the node may start pulling now
// (the waves), whenever that changes, and again when the agent has none.
type setsWatcher struct {
	client kubernetes.Interface
	caches *setCaches // the process's, run by its caller
	cfg    Config
	log    *slog.Logger
	http   *http.Client
	token  *agentToken

	changed chan struct{} // a set, a NodeImages or the Node changed
	resend  chan struct{} // the agent has no sets: send them again

	node  cache.SharedIndexInformer // this Node
	any   atomic.Bool               // the last sets computed were not none
	sends atomic.Uint64             // raised as each send starts and as it ends: odd while one runs
	sent  []byte                    // the body of the last PUT the agent took
	bad   string                    // the last sets that did not decode, logged once
	took  func()                    // called when the agent took new sets; nil: nothing
}

func newSetsWatcher(client kubernetes.Interface, caches *setCaches, cfg Config, log *slog.Logger, hc *http.Client) *setsWatcher {
	return &setsWatcher{client: client, caches: caches, cfg: cfg, log: log, http: hc, token: &agentToken{path: cfg.TokenFile},
		changed: make(chan struct{}, 1), resend: make(chan struct{}, 1)}
}

// mark is what askResend compares with, read before the report is.
func (w *setsWatcher) mark() uint64 { return w.sends.Load() }

// askResend asks for the sets to be sent again when there are any: the
// agent says it has none, in a report asked for at mark. A send running
// then, or begun since, may have reached the agent after the report did:
// that report says nothing of it (the next says whether the agent lost
// the sets).
func (w *setsWatcher) askResend(mark uint64) {
	if !w.any.Load() || mark%2 == 1 || w.sends.Load() != mark {
		return
	}
	select {
	case w.resend <- struct{}{}:
	default:
	}
}

// start watches the process's caches and makes and starts the informer of
// this Node.
func (w *setsWatcher) start(ctx context.Context) (stop func(), err error) {
	// The status of a set is the leader's: the waves read its spec alone.
	remove, err := w.caches.watch(w.changed, statusOnly)
	if err != nil {
		return nil, err
	}
	handler := notifier(w.changed)
	nodes := informers.NewSharedInformerFactoryWithOptions(w.client, 0, informers.WithTransform(onlyLabels),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + w.cfg.Node }))
	w.node = nodes.Core().V1().Nodes().Informer()
	if _, err := w.node.AddEventHandler(handler); err != nil {
		remove()
		return nil, err
	}
	nodes.Start(ctx.Done())
	return func() { remove(); nodes.Shutdown() }, nil
}

// run watches until ctx ends: the first sets go to the agent once the
// caches have synced, then each change after the debounce, sets the agent
// did not take after the interval, and the sets again when asked.
func (w *setsWatcher) run(ctx context.Context) {
	stop, err := w.start(ctx)
	if err != nil {
		w.log.Error("watching the ImageSets", "error", err)
		return
	}
	defer stop()
	if !w.caches.synced(ctx) || !cache.WaitForCacheSync(ctx.Done(), w.node.HasSynced) {
		return
	}
	w.log.Info("watching the ImageSets", "node", w.cfg.Node)
	loop := sendLoop{what: "the ImageSets", agent: w.cfg.Agent, log: w.log, changed: w.changed, resend: w.resend,
		debounce: setsDebounce, interval: w.cfg.Interval, send: w.send}
	loop.run(ctx, false)
}

// send PUTs the sets when they differ from what the agent took last, or
// when forced.
func (w *setsWatcher) send(ctx context.Context, force bool) error {
	w.sends.Add(1)
	defer w.sends.Add(1)
	sets := w.stage()
	body, err := json.Marshal(sets)
	if err != nil {
		return fmt.Errorf("encoding the ImageSets: %w", err)
	}
	if !force && bytes.Equal(body, w.sent) {
		return nil
	}
	w.sent = nil
	if err := putAgent(ctx, w.http, w.cfg.Agent, "/sets", w.token, body); err != nil {
		return err
	}
	w.sent = body
	if w.took != nil {
		w.took()
	}
	pulls := 0
	for _, s := range sets.Sets {
		pulls += len(s.MayPull)
	}
	w.log.Debug("sent the ImageSets to the agent", "sets", len(sets.Sets), "mayPull", pulls)
	return nil
}

// stage is the sets as the caches hold them now.
func (w *setsWatcher) stage() report.StageSets {
	sets, _, bad := cachedSets(w.caches.sets.GetStore())
	if msg := strings.Join(bad, "; "); msg != w.bad {
		w.bad = msg
		if msg != "" {
			w.log.Warn("ImageSets left out", "error", msg)
		}
	}
	var labels map[string]string
	for _, o := range w.node.GetStore().List() {
		if n, ok := o.(*corev1.Node); ok && n.Name == w.cfg.Node {
			labels = n.Labels
		}
	}
	store := w.caches.nodes.GetStore()
	out := stageSets(w.cfg.Node, labels, sets, cachedNodes(store, func(string) map[string]string { return nil }), peerMirrors(store))
	if len(out.Sets) < len(sets) {
		w.log.Warn("more ImageSets than the agent takes: the last by name left out", "sets", len(sets), "sent", len(out.Sets))
	}
	w.any.Store(len(out.Sets) > 0)
	return out
}

// stageSets is what node, of these labels, is to do of sets (sorted by
// name): each set (the first report.MaxSets), whether it selects the node,
// and which of its images the node may start pulling now, by
// imageset.Admissions over nodes as their agents say (no labels: a reporter
// reads no other Node, and takes each agent's word for its selection),
// each from the peer mirror of the holder it places the pull on (mirrors,
// by node; none when that holder names none).
func stageSets(node string, labels map[string]string, sets []imageset.ImageSet, nodes []imageset.Node, mirrors map[string]string) report.StageSets {
	out := report.StageSets{Sets: []report.StageSet{}}
	for _, set := range sets {
		if len(out.Sets) == report.MaxSets {
			break
		}
		s := report.StageSet{Name: set.Metadata.Name, Generation: set.Metadata.Generation,
			Selected: set.Spec.Selects(labels), Images: set.Spec.Images}
		if s.Images == nil {
			s.Images = []string{}
		}
		if s.Selected {
			for _, a := range imageset.Admissions(node, set, nodes) {
				s.MayPull = append(s.MayPull, a.Image)
				if m := mirrors[a.From]; m != "" {
					if s.From == nil {
						s.From = map[string]string{}
					}
					s.From[a.Image] = m
				}
			}
		}
		out.Sets = append(out.Sets, s)
	}
	return out
}

// peerMirrors are the peer mirrors the NodeImages in store name, by node.
func peerMirrors(store cache.Store) map[string]string {
	out := map[string]string{}
	for _, o := range store.List() {
		if n, ok := o.(*nodeSets); ok && n.PeerMirror != "" {
			out[n.Name] = n.PeerMirror
		}
	}
	return out
}

// busy reports whether any image of a set selecting the node is being
// pulled or waits for its turn: the reports then come every second, so
// that a finished pull reaches the other nodes' waves at once.
func busy(sets []report.SetState) bool {
	for _, s := range sets {
		if !s.Selected {
			continue
		}
		for _, img := range s.Images {
			if img.Phase == report.SetPulling || img.Phase == report.SetWaiting {
				return true
			}
		}
	}
	return false
}

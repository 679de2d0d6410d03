// Package reporter is holdfast's Kubernetes reporter: it reads the agent's
// GET /report and keeps the node's HoldfastPinned condition and the Events on
// the Node in line with it; it watches the workloads for the images the node
// needs, sends that set to the agent, and keeps the HoldfastImagesReady
// condition and the node's NodeImages object from what the agent says of it
// and of what the node holds. With ImageSets it hands the agent every
// ImageSet and the images the node may pull in its wave (from every node's
// NodeImages), and one reporter, elected with a Lease, writes each set's
// status. It is the only package that imports
// client-go's clientset and informers, and it runs in its own binary
// (holdfast-reporter), so that the node CLI does not link them and the agent
// never waits for the API server; holdfast check --cluster reads what it
// writes through internal/kubeapi (client-go's clientcmd and dynamic client).
package reporter

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// maxBackoff bounds the wait after the API server did not answer.
const maxBackoff = 5 * time.Minute

// Config says where the agent is, which node to report on, and how often.
type Config struct {
	Agent    string        // base URL of the agent's HTTP server
	Node     string        // the Node's name
	Interval time.Duration // between reads of /report
	Log      *slog.Logger
	HTTP     *http.Client // for /report and /required; nil: one with a 5 s timeout
	// TokenFile holds the agent's token (the agent's --token-file), sent
	// with PUT /required; read again when the agent answers 401.
	TokenFile string

	// Required: watch the images the node's workloads need, send them to
	// the agent and keep the HoldfastImagesReady condition.
	Required bool
	// ClusterWorkloads: besides the Pods bound to the node, every workload
	// of the cluster that may run on the node (by its nodeSelector and node
	// affinity against the Node's labels).
	ClusterWorkloads bool
	// Debounce is how long changes gather before the set is sent (1 s).
	Debounce time.Duration
	// Apply writes the node's NodeImages object (with Required); nil:
	// server-side apply through the client.
	Apply Apply

	// ImageSets (with Required): watch the ImageSets and every node's
	// NodeImages through Dynamic, send the agent the sets and which of
	// their images the node may pull now (PUT /sets), and write what the
	// agent says of them into the node's NodeImages.
	ImageSets bool
	Dynamic   dynamic.Interface
	// Leader (with ImageSets): take part in the election of the reporter
	// that writes each ImageSet's status; nil: none.
	Leader *Lease
}

// Reporter keeps the Node's condition and Events in line with the agent's
// report. It keeps its own state: use one per node, from one goroutine.
type Reporter struct {
	client kubernetes.Interface
	cfg    Config
	log    *slog.Logger
	http   *http.Client
	now    func() time.Time

	req    *requiredWatcher // nil unless cfg.Required
	images *nodeImages      // nil unless cfg.Required
	caches *setCaches       // nil unless cfg.ImageSets: what sets and leader read
	sets   *setsWatcher     // nil unless cfg.ImageSets
	leader *leader          // nil unless cfg.Leader
	busy   bool             // the last report had a set's image pulling or waiting
	wake   chan struct{}    // read the report now: the agent took new sets
	// written holds each condition as last patched (or as the Node had it
	// before the first patch).
	written map[corev1.NodeConditionType]*corev1.NodeCondition

	uid     types.UID             // the Node's, for the Events' involvedObject
	after   uint64                // journal events up to here are on the Node
	journal time.Time             // the Started of the journal after counts in
	primed  bool                  // sentUpTo and sent were read from the Events on the Node
	upTo    time.Time             // journal events up to this time are on the Node (see prime)
	sent    map[string]*sentEvent // reason+message → the Event it went to, to aggregate
	order   []string              // keys of sent, oldest first, to bound it
	behind  bool                  // the last report left journal events to send
}

// New makes a reporter writing through client.
func New(client kubernetes.Interface, cfg Config) *Reporter {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	hc := cfg.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = time.Second
	}
	r := &Reporter{client: client, cfg: cfg, log: log, http: hc, now: time.Now, sent: map[string]*sentEvent{}, wake: make(chan struct{}, 1),
		written: map[corev1.NodeConditionType]*corev1.NodeCondition{}}
	if cfg.Required {
		r.req = newRequiredWatcher(client, cfg, log, hc)
		r.images = &nodeImages{apply: cfg.Apply}
		if r.images.apply == nil {
			r.images.apply = applyThrough(client)
		}
		if cfg.ImageSets && cfg.Dynamic != nil {
			r.caches = newSetCaches(client, cfg.Dynamic)
			r.sets = newSetsWatcher(client, r.caches, cfg, log, hc)
			r.sets.took = r.wakeUp
			if cfg.Leader != nil {
				r.leader = &leader{client: client, dyn: cfg.Dynamic, caches: r.caches, node: cfg.Node, lease: *cfg.Leader, log: log, now: time.Now}
			}
		}
	}
	return r
}

// Run reports every interval until ctx ends; then it returns nil. When the API
// server does not answer, it tries again later, waiting twice as long each
// time up to 5 minutes; journal events not yet on the Node are sent then.
// With Required, it watches the workloads meanwhile and sends the agent the
// images the node needs; with ImageSets, the sets too, and with Leader it
// stands for election and, leading, writes the sets' status.
func (r *Reporter) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if r.req != nil {
		wg.Go(func() { r.req.run(ctx) })
	}
	if r.caches != nil {
		wg.Go(func() { r.caches.run(ctx) })
	}
	if r.sets != nil {
		wg.Go(func() { r.sets.run(ctx) })
	}
	if r.leader != nil {
		wg.Go(func() { r.leader.run(ctx) })
	}
	return r.report(ctx)
}

// wakeUp has the report read now, without waiting: the agent took new
// sets, and what it says of them is for the other nodes' waves.
func (r *Reporter) wakeUp() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Reporter) report(ctx context.Context) error {
	wait := time.Duration(0)
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		case <-r.wake:
		}
		if err := r.Once(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			failures++
			wait = min(r.cfg.Interval<<min(failures, 10), maxBackoff)
			r.log.Warn("reporting to the API server; trying again", "node", r.cfg.Node, "in", wait.String(), "error", err)
			continue
		}
		if failures > 0 {
			r.log.Info("reporting to the API server again", "node", r.cfg.Node)
		}
		failures = 0
		wait = r.cfg.Interval
		if r.busy {
			wait = min(wait, time.Second)
		}
		if r.behind {
			wait = 0
		}
	}
}

// Once reads the agent's report once and brings the Node in line with it:
// the conditions (Unknown when the report cannot be read), then the journal
// events it has not sent yet, oldest first. It returns the API server's
// error, if any: what was not written is written by a later call. With
// Required, a report that has no set asks for the set to be sent again,
// and the NodeImages object is written when it changed (its failure is
// logged, not returned: it is tried again with the next report). With
// ImageSets, a report with no sets asks for them to be sent again (unless
// they were being sent as it was read).
func (r *Reporter) Once(ctx context.Context) error {
	var sends uint64
	if r.sets != nil {
		sends = r.sets.mark()
	}
	rep, err := r.fetch(ctx)
	var conds []corev1.NodeCondition
	if err != nil {
		r.log.Warn("reading the agent's report", "agent", r.cfg.Agent, "error", err)
		msg := truncate(fmt.Sprintf("reading the agent's report: %v", err))
		conds = append(conds, corev1.NodeCondition{Type: ConditionType, Status: corev1.ConditionUnknown, Reason: ReasonAgentUnreachable, Message: msg})
		if r.req != nil {
			conds = append(conds, corev1.NodeCondition{Type: ImagesConditionType, Status: corev1.ConditionUnknown, Reason: ReasonNoRequiredSet, Message: msg})
		}
	} else {
		conds = append(conds, Condition(rep))
		if r.req != nil {
			conds = append(conds, ImagesCondition(rep.Required))
			if rep.Required == nil || !rep.Required.Known {
				r.req.askResend()
			}
		}
		if r.sets != nil && rep.Sets == nil {
			r.sets.askResend(sends)
		}
		r.busy = r.sets != nil && busy(rep.Sets)
	}
	if err := r.setConditions(ctx, conds...); err != nil {
		return err
	}
	if rep == nil {
		return nil
	}
	r.publish(ctx, rep.Required, rep.Sets, rep.PeerMirror)
	return r.sendEvents(ctx, rep.Events)
}

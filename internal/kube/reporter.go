// Package kube is holdfast's Kubernetes reporter: it reads the agent's
// GET /report and keeps the node's HoldfastPinned condition and the Events on
// the Node in line with it; it watches the workloads for the images the node
// needs, sends that set to the agent, and keeps the HoldfastImagesReady
// condition and the node's NodeImages object from what the agent says of it
// and of what the node holds. It is the only package that imports
// client-go, and it runs in its own binary (holdfast-reporter), so that the
// node CLI starts without client-go's init cost and the agent never waits
// for the API server; holdfast check --cluster reads what it writes through
// internal/kubeapi, a plain REST reader.
package kube

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/holdfast-project/holdfast/internal/journal"
	"github.com/holdfast-project/holdfast/internal/required"
)

// The node conditions the reporter keeps, and their reasons.
const (
	ConditionType = corev1.NodeConditionType("HoldfastPinned")
	// ImagesConditionType says whether the node holds, pinned, the images
	// its workloads need.
	ImagesConditionType = corev1.NodeConditionType("HoldfastImagesReady")

	ReasonAllPinned        = "AllPinned"
	ReasonSourcesFailing   = "SourcesFailing"
	ReasonHealBackoff      = "HealBackoff"
	ReasonNotReady         = "NotReady"
	ReasonAgentUnreachable = "AgentUnreachable"

	// HoldfastImagesReady's reasons, besides ReasonAllPinned.
	ReasonImagesMissing  = "ImagesMissing"  // some image is missing, or held at another digest
	ReasonImagesUnpinned = "ImagesUnpinned" // every image is present, some not pinned
	ReasonNoRequiredSet  = "NoRequiredSet"  // the agent has no set yet, or cannot be read

	// Component is the source component of the Events on the Node.
	Component = "holdfast"
	// EventNamespace is where the Events on the (cluster-scoped) Node go.
	EventNamespace = metav1.NamespaceDefault

	// shownFailures is how many failing sources a condition message names.
	shownFailures = 3
	// shownNotReady is how many images not pinned a condition message names.
	shownNotReady = 5
	maxBackoff    = 5 * time.Minute
	eventCache    = 512
	// eventsPerRound bounds the Events one report sends: at client-go's
	// default 5 writes a second, a burst of journal events would hold the
	// next condition update back for as long.
	eventsPerRound = 20
	// eventTTL is how long the API server keeps Events (kube-apiserver's
	// --event-ttl default).
	eventTTL = time.Hour
	// annotationJournalTime on an Event is the time of the last journal
	// event it stands for: a reporter that starts again sends none up to it.
	annotationJournalTime = "holdfast.io/journal-time"
	// maxMessage bounds the messages of the condition and the Events, as
	// client-go's event recorders bound theirs.
	maxMessage = 1024
)

// Config says where the agent is, which node to report on, and how often.
type Config struct {
	Agent    string        // base URL of the agent's HTTP server
	Node     string        // the Node's name
	Interval time.Duration // between reads of /report
	Log      *slog.Logger
	HTTP     *http.Client // for /report and /required; nil: one with a 5 s timeout

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

type sentEvent struct {
	name  string
	count int32
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
	r := &Reporter{client: client, cfg: cfg, log: log, http: hc, now: time.Now, sent: map[string]*sentEvent{},
		written: map[corev1.NodeConditionType]*corev1.NodeCondition{}}
	if cfg.Required {
		r.req = newRequiredWatcher(client, cfg, log, hc)
		r.images = &nodeImages{apply: cfg.Apply}
		if r.images.apply == nil {
			r.images.apply = applyThrough(client)
		}
	}
	return r
}

// Run reports every interval until ctx ends; then it returns nil. When the API
// server does not answer, it tries again later, waiting twice as long each
// time up to 5 minutes; journal events not yet on the Node are sent then.
// With Required, it watches the workloads meanwhile and sends the agent the
// images the node needs.
func (r *Reporter) Run(ctx context.Context) error {
	if r.req != nil {
		var wg sync.WaitGroup
		defer wg.Wait()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		wg.Go(func() { r.req.run(ctx) })
		return r.report(ctx)
	}
	return r.report(ctx)
}

func (r *Reporter) report(ctx context.Context) error {
	wait := time.Duration(0)
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
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
// logged, not returned: it is tried again with the next report).
func (r *Reporter) Once(ctx context.Context) error {
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
	}
	if err := r.setConditions(ctx, conds...); err != nil {
		return err
	}
	if rep == nil {
		return nil
	}
	r.publish(ctx, rep.Required)
	return r.sendEvents(ctx, rep.Events)
}

// fetch reads /report?after=N. When the agent's journal is behind the
// cursor, the agent started again: its journal is read from the start.
func (r *Reporter) fetch(ctx context.Context) (*journal.Report, error) {
	rep, err := r.get(ctx, r.after)
	if err != nil {
		return nil, err
	}
	if rep.Next == 0 || rep.Next-1 < r.after || (!r.journal.IsZero() && !rep.Started.Equal(r.journal)) {
		r.log.Info("the agent's journal starts again (the agent restarted)", "cursor", r.after, "next", rep.Next)
		r.after = 0
		if rep, err = r.get(ctx, 0); err != nil {
			return nil, err
		}
	}
	r.journal = rep.Started
	if len(rep.Events) > 0 && rep.Events[0].Seq > r.after+1 {
		r.log.Warn("journal events dropped by the agent before they were read", "from", r.after+1, "to", rep.Events[0].Seq-1)
	}
	return rep, nil
}

func (r *Reporter) get(ctx context.Context, after uint64) (*journal.Report, error) {
	body, u, err := r.getAgent(ctx, "/report?after="+url.QueryEscape(fmt.Sprint(after)), 4<<20)
	if err != nil {
		return nil, err
	}
	var rep journal.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		return nil, fmt.Errorf("GET %s: decoding: %w", u, err)
	}
	return &rep, nil
}

// getAgent GETs path from the agent: the body (at most limit bytes) of a
// 200, and the URL asked, for errors.
func (r *Reporter) getAgent(ctx context.Context, path string, limit int64) (body []byte, u string, err error) {
	u = strings.TrimSuffix(r.cfg.Agent, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, u, fmt.Errorf("GET %s: %w", u, err)
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return nil, u, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, u, fmt.Errorf("GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, u, fmt.Errorf("GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, u, nil
}

// Condition is the HoldfastPinned condition a report calls for (without times).
func Condition(rep *journal.Report) corev1.NodeCondition {
	c := corev1.NodeCondition{Type: ConditionType, Status: corev1.ConditionFalse}
	pinned := fmt.Sprintf("%d images pinned", rep.Pinned)
	switch {
	case !rep.Ready:
		c.Reason, c.Message = ReasonNotReady, pinned+"; the agent's first pass has not finished"
	case len(rep.Failing) > 0:
		var names []string
		for _, f := range rep.Failing[:min(len(rep.Failing), shownFailures)] {
			if f.Source == "" {
				names = append(names, f.Error)
			} else {
				names = append(names, fmt.Sprintf("%s (%s)", filepath.Base(f.Source), f.Error))
			}
		}
		msg := pinned + "; failing: " + strings.Join(names, ", ")
		if more := len(rep.Failing) - shownFailures; more > 0 {
			msg += fmt.Sprintf(" and %d more", more)
		}
		c.Reason, c.Message = ReasonSourcesFailing, msg
	case len(rep.HealBackoff) > 0:
		msg := pinned + "; heal backing off: " + strings.Join(rep.HealBackoff[:min(len(rep.HealBackoff), shownFailures)], ", ")
		if more := len(rep.HealBackoff) - shownFailures; more > 0 {
			msg += fmt.Sprintf(" and %d more", more)
		}
		c.Reason, c.Message = ReasonHealBackoff, msg
	default:
		c.Status, c.Reason, c.Message = corev1.ConditionTrue, ReasonAllPinned, pinned
	}
	c.Message = truncate(c.Message)
	return c
}

// ImagesCondition is the HoldfastImagesReady condition the report's
// required part calls for (without times): True when every image of the set
// is pinned, False naming the images that are not, Unknown while the agent
// has no set.
func ImagesCondition(req *required.Report) corev1.NodeCondition {
	c := corev1.NodeCondition{Type: ImagesConditionType}
	if req == nil || !req.Known {
		c.Status, c.Reason, c.Message = corev1.ConditionUnknown, ReasonNoRequiredSet, "the agent has no set of required images yet"
		return c
	}
	total := 0
	for _, n := range req.Counts {
		total += n
	}
	if req.Ready {
		c.Status, c.Reason, c.Message = corev1.ConditionTrue, ReasonAllPinned, fmt.Sprintf("%d required images pinned", total)
		return c
	}
	c.Status, c.Reason = corev1.ConditionFalse, ReasonImagesUnpinned
	nr := slices.Clone(req.NotReady)
	slices.SortStableFunc(nr, func(a, b required.Verdict) int { return cmp.Compare(stateRank(a.State), stateRank(b.State)) })
	var names []string
	for _, v := range nr {
		if v.State == stateMissing || v.State == stateMismatch {
			c.Reason = ReasonImagesMissing
		}
		if len(names) == shownNotReady {
			continue
		}
		name := v.Ref + " " + v.State
		if len(v.UsedBy) > 0 {
			// "Deployment a/b containers/x": the object, without its container.
			user := strings.Fields(v.UsedBy[0])
			name += " (" + strings.Join(user[:min(len(user), 2)], " ") + ")"
		}
		names = append(names, name)
	}
	if req.Counts[stateMissing]+req.Counts[stateMismatch] > 0 {
		c.Reason = ReasonImagesMissing
	}
	msg := strings.Join(names, ", ")
	notReady := max(len(nr), total-req.Counts[statePinned])
	if more := notReady - len(names); more > 0 {
		msg += fmt.Sprintf(" and %d more", more)
	}
	var counts []string
	for _, st := range slices.SortedFunc(maps.Keys(req.Counts), func(a, b string) int {
		return cmp.Or(cmp.Compare(countRank(a), countRank(b)), cmp.Compare(a, b))
	}) {
		if n := req.Counts[st]; n > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", n, st))
		}
	}
	if len(counts) > 0 {
		msg += "; " + strings.Join(counts, ", ")
	}
	if msg = strings.TrimPrefix(msg, "; "); msg == "" {
		msg = "some required images are not pinned"
	}
	c.Message = truncate(msg)
	return c
}

// The states of an image the agent reports.
const (
	statePinned   = "pinned"
	statePresent  = "present"
	stateMissing  = "missing"
	stateMismatch = "mismatch"
)

// stateRank puts the images the kubelet would have to pull first.
func stateRank(s string) int {
	switch s {
	case stateMissing, stateMismatch:
		return 0
	case statePresent:
		return 1
	}
	return 2
}

// countRank orders the counts: pinned, present, missing, mismatch, others.
func countRank(s string) int {
	if i := slices.Index([]string{statePinned, statePresent, stateMissing, stateMismatch}, s); i >= 0 {
		return i
	}
	return 4
}

// truncate cuts s to maxMessage bytes, on a rune boundary, marking the cut.
func truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	const mark = "…"
	cut := maxMessage - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// heartbeat is how often an unchanged condition is written again.
func (r *Reporter) heartbeat() time.Duration { return max(r.cfg.Interval, time.Minute) }

// setConditions patches the conditions on nodes/status, all in one patch,
// when one of them changed or its heartbeat is due. lastTransitionTime moves
// only when the status does; until a condition is first written, the Node's
// own copy of it says what it was.
func (r *Reporter) setConditions(ctx context.Context, conds ...corev1.NodeCondition) error {
	now := metav1.NewTime(r.now().Truncate(time.Second))
	read := r.uid == ""
	for _, c := range conds {
		read = read || r.written[c.Type] == nil
	}
	if read {
		node, err := r.client.CoreV1().Nodes().Get(ctx, r.cfg.Node, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading node %s: %w", r.cfg.Node, err)
		}
		r.uid = node.UID
		for _, nc := range node.Status.Conditions {
			if r.written[nc.Type] == nil && slices.ContainsFunc(conds, func(c corev1.NodeCondition) bool { return c.Type == nc.Type }) {
				r.written[nc.Type] = nc.DeepCopy()
			}
		}
	}
	if !slices.ContainsFunc(conds, func(c corev1.NodeCondition) bool {
		prev := r.written[c.Type]
		return prev == nil || !sameCondition(prev, &c) || now.Sub(prev.LastHeartbeatTime.Time) >= r.heartbeat()
	}) {
		return nil
	}
	var due []corev1.NodeCondition
	var names []string
	for _, c := range conds {
		prev := r.written[c.Type]
		c.LastHeartbeatTime = now
		c.LastTransitionTime = now
		if prev != nil && prev.Status == c.Status && !prev.LastTransitionTime.IsZero() {
			c.LastTransitionTime = prev.LastTransitionTime
		}
		due = append(due, c)
		names = append(names, string(c.Type))
	}
	what := strings.Join(names, " and ")
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": due}})
	if err != nil {
		return fmt.Errorf("encoding the %s condition: %w", what, err)
	}
	if _, err := r.client.CoreV1().Nodes().Patch(ctx, r.cfg.Node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patching the %s condition of node %s: %w", what, r.cfg.Node, err)
	}
	for _, c := range due {
		if prev := r.written[c.Type]; prev == nil || !sameCondition(prev, &c) {
			r.log.Info("node condition", "node", r.cfg.Node, "type", c.Type, "status", c.Status, "reason", c.Reason, "message", c.Message)
		}
		r.written[c.Type] = &c
	}
	return nil
}

func sameCondition(a, b *corev1.NodeCondition) bool {
	return a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message
}

// sendEvents puts the journal events after the cursor on the Node, oldest
// first, moving the cursor past each one written: on an error the rest are
// sent by a later call, and none twice.
func (r *Reporter) sendEvents(ctx context.Context, evs []journal.Event) error {
	if !r.primed {
		r.prime(ctx)
	}
	sent := 0
	r.behind = false
	for _, ev := range evs {
		if ev.Seq <= r.after {
			continue
		}
		if !ev.Time.After(r.upTo) {
			r.after = ev.Seq // on the Node already, sent before this reporter started
			continue
		}
		if sent == eventsPerRound {
			r.behind = true // the rest with the next report, at once: the conditions do not wait for them all
			return nil
		}
		if err := r.sendEvent(ctx, ev); err != nil {
			return err
		}
		sent++
		r.after = ev.Seq
	}
	return nil
}

// prime reads what an earlier reporter of this Node left: the Events it made,
// each stamped with the time of the last journal event it stands for. Journal
// events up to the latest of those are on the Node, and a repeat of one of
// them is counted on its Event. With none there (or the API not letting it
// list Events), events older than Events live in the API are not sent: they
// would have gone by now.
func (r *Reporter) prime(ctx context.Context) {
	r.primed = true
	r.upTo = r.now().Add(-eventTTL)
	l, err := r.client.CoreV1().Events(EventNamespace).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + r.cfg.Node + ",source=" + Component})
	if err != nil {
		r.log.Warn("listing the Events already on the Node; events of the last hour may be sent again", "node", r.cfg.Node, "error", err)
		return
	}
	items := l.Items
	slices.SortFunc(items, func(a, b corev1.Event) int { return a.LastTimestamp.Compare(b.LastTimestamp.Time) })
	for _, e := range items {
		if e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != r.cfg.Node || e.Source.Component != Component {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, e.Annotations[annotationJournalTime])
		if err != nil {
			continue // not one this reporter stamps
		}
		if t.After(r.upTo) {
			r.upTo = t
		}
		r.remember(eventKey(e.Reason, e.Type, e.Message), &sentEvent{name: e.Name, count: e.Count})
	}
}

func eventKey(reason, typ, message string) string {
	return reason + "\x00" + typ + "\x00" + truncate(message)
}

// sendEvent creates an Event on the Node, or, for a reason and message it sent
// before, counts it again on that Event. The Event's name is made from the
// journal event, so a reporter that starts again and sends it again finds it
// there.
func (r *Reporter) sendEvent(ctx context.Context, ev journal.Event) error {
	key := eventKey(ev.Reason, ev.Type, ev.Message)
	at := metav1.NewTime(ev.Time)
	stamp := ev.Time.UTC().Format(time.RFC3339Nano)
	events := r.client.CoreV1().Events(EventNamespace)
	if s, ok := r.sent[key]; ok {
		patch, err := json.Marshal(map[string]any{"count": s.count + 1, "lastTimestamp": at,
			"metadata": map[string]any{"annotations": map[string]string{annotationJournalTime: stamp}}})
		if err != nil {
			return fmt.Errorf("encoding event %s: %w", s.name, err)
		}
		_, err = events.Patch(ctx, s.name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		if err == nil {
			s.count++
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("counting event %s/%s again: %w", EventNamespace, s.name, err)
		}
		// The Event expired: it is made anew.
	}
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%d\x00%d\x00%s", ev.Seq, ev.Time.UnixNano(), key)
	name := fmt.Sprintf("%s.holdfast.%016x", r.cfg.Node, h.Sum64())
	e := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: name, Namespace: EventNamespace, Annotations: map[string]string{annotationJournalTime: stamp}},
		InvolvedObject:      corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: r.cfg.Node, UID: r.uid},
		Reason:              ev.Reason,
		Message:             truncate(ev.Message),
		Type:                ev.Type,
		Source:              corev1.EventSource{Component: Component, Host: r.cfg.Node},
		FirstTimestamp:      at,
		LastTimestamp:       at,
		Count:               1,
		ReportingController: Component,
		ReportingInstance:   r.cfg.Node,
	}
	if _, err := events.Create(ctx, e, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating event %s/%s (%s): %w", EventNamespace, name, ev.Reason, err)
	}
	r.remember(key, &sentEvent{name: name, count: 1})
	return nil
}

// remember keeps where an event went, forgetting the oldest past eventCache.
func (r *Reporter) remember(key string, s *sentEvent) {
	if _, ok := r.sent[key]; !ok {
		r.order = append(r.order, key)
	}
	r.sent[key] = s
	for len(r.order) > eventCache {
		delete(r.sent, r.order[0])
		r.order = r.order[1:]
	}
}

package reporter

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/holdfast-project/holdfast/internal/report"
)

// The Events the reporter puts on the Node.
const (
	// Component is the source component of the Events on the Node.
	Component = "holdfast"
	// EventNamespace is where the Events on the (cluster-scoped) Node go.
	EventNamespace = metav1.NamespaceDefault

	eventCache = 512
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
)

// sentEvent is an Event the reporter made on the Node, and its count.
type sentEvent struct {
	name  string
	count int32
}

// sendEvents puts the journal events after the cursor on the Node, oldest
// first, moving the cursor past each one written: on an error the rest are
// sent by a later call, and none twice.
func (r *Reporter) sendEvents(ctx context.Context, evs []report.Event) error {
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
func (r *Reporter) sendEvent(ctx context.Context, ev report.Event) error {
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

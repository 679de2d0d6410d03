package reporter

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/units"
)

// The node conditions the reporter keeps, and their reasons.
const (
	ConditionType = corev1.NodeConditionType("HoldfastPinned")
	// ImagesConditionType says whether the node holds, pinned, the images
	// its workloads need.
	ImagesConditionType = corev1.NodeConditionType(report.ImagesConditionType)

	ReasonAllPinned        = "AllPinned"
	ReasonSourcesFailing   = "SourcesFailing"
	ReasonHealBackoff      = "HealBackoff"
	ReasonNotReady         = "NotReady"
	ReasonAgentUnreachable = "AgentUnreachable"

	// HoldfastImagesReady's reasons, besides ReasonAllPinned.
	ReasonImagesMissing  = "ImagesMissing"  // some image is missing, or held at another digest
	ReasonImagesUnpinned = "ImagesUnpinned" // every image is present, some not pinned
	ReasonNoRequiredSet  = "NoRequiredSet"  // the agent has no set yet, or cannot be read

	// shownFailures is how many failing sources a condition message names.
	shownFailures = 3
	// shownNotReady is how many images not pinned a condition message names.
	shownNotReady = 5
	// maxMessage bounds the messages of the condition and the Events, as
	// client-go's event recorders bound theirs.
	maxMessage = 1024
)

// Condition is the HoldfastPinned condition a report calls for (without times).
func Condition(rep *report.Report) corev1.NodeCondition {
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
		msg := pinned + "; failing: " + strings.Join(names, ", ") + units.More(len(rep.Failing)-shownFailures)
		c.Reason, c.Message = ReasonSourcesFailing, msg
	case len(rep.HealBackoff) > 0:
		msg := pinned + "; heal backing off: " + units.List(rep.HealBackoff, shownFailures)
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
func ImagesCondition(req *report.Required) corev1.NodeCondition {
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
	slices.SortStableFunc(nr, func(a, b report.Image) int { return cmp.Compare(stateRank(a.State), stateRank(b.State)) })
	var names []string
	for _, v := range nr {
		if v.State == report.Missing || v.State == report.Mismatch {
			c.Reason = ReasonImagesMissing
		}
		if len(names) == shownNotReady {
			continue
		}
		name := v.Ref + " " + string(v.State)
		switch {
		case strings.HasPrefix(v.PullError, "refused"):
			name += ": refused by the signature policy"
		case v.PullError != "":
			name += ": its pull from peers failed"
		case v.Pulling:
			name += ": being pulled from peers"
		}
		if len(v.UsedBy) > 0 {
			// "Deployment a/b containers/x": the object, without its container.
			user := strings.Fields(v.UsedBy[0])
			name += " (" + strings.Join(user[:min(len(user), 2)], " ") + ")"
		}
		names = append(names, name)
	}
	if req.Counts[report.Missing]+req.Counts[report.Mismatch] > 0 {
		c.Reason = ReasonImagesMissing
	}
	notReady := max(len(nr), total-req.Counts[report.Pinned])
	msg := strings.Join(names, ", ") + units.More(notReady-len(names))
	var counts []string
	for _, st := range slices.SortedFunc(maps.Keys(req.Counts), func(a, b report.State) int {
		return cmp.Or(cmp.Compare(countRank(a), countRank(b)), cmp.Compare(a, b))
	}) {
		if n := req.Counts[st]; n > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", n, st))
		}
	}
	if req.Pulling > 0 {
		counts = append(counts, fmt.Sprintf("%d being pulled from peers", req.Pulling))
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

// stateRank puts the images the kubelet would have to pull first.
func stateRank(s report.State) int {
	switch s {
	case report.Missing, report.Mismatch:
		return 0
	case report.Present:
		return 1
	}
	return 2
}

// countRank orders the counts: pinned, present, missing, mismatch, others.
func countRank(s report.State) int {
	if i := slices.Index([]report.State{report.Pinned, report.Present, report.Missing, report.Mismatch}, s); i >= 0 {
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

package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-project/holdfast/internal/journal"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/pattern"
	"github.com/holdfast-project/holdfast/internal/report"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/workload"
)

// required is what the agent keeps of the images the node's workloads
// need: the set the reporter last sent, and where each stood when last
// judged. Each judgment feeds the peer source.
type required struct {
	rt      hfruntime.Runtime
	pull    bool // Config.PullRequired
	pulls   pullState
	peers   *peerSource
	clock   Clock
	log     *slog.Logger
	rec     Recorder
	journal *journal.Journal
	kicks   chan struct{} // judge the required images again
	timer   Timer         // the peer list's next grace ends

	judging sync.Mutex // one judgment at a time: each compares with the last

	mu     sync.Mutex
	req    *report.RequiredSet     // nil until a reporter sends one
	states map[string]report.State // ref → state, as last judged
	report report.Required
	held   report.Held // what the node held at the last judgment
}

// pullState is what the passes know of a reference's pulls (*pass.Runner).
type pullState interface {
	PullFailure(ref string) error
	Refusal(ref string) string
}

func newRequired(rt hfruntime.Runtime, pull bool, pulls pullState, peers *peerSource, clock Clock, log *slog.Logger, rec Recorder, j *journal.Journal) *required {
	return &required{rt: rt, pull: pull, pulls: pulls, peers: peers, clock: clock, log: log, rec: rec, journal: j,
		kicks: make(chan struct{}, 1), timer: clock.NewTimer()}
}

// SetRequired takes the set of images the node's workloads need (PUT
// /required): each reference normalised; one that does not parse is an
// error naming it, and the set is not taken. The set is judged before it
// returns, and again after every pass and image event.
func (a *Agent) SetRequired(ctx context.Context, set report.RequiredSet) error {
	return a.required.take(ctx, set)
}

// take is SetRequired.
func (r *required) take(ctx context.Context, set report.RequiredSet) error {
	out := report.RequiredSet{Images: make([]report.RequiredImage, 0, len(set.Images))}
	seen := map[string]int{}
	for _, img := range set.Images {
		ref, err := pattern.NormalizeRef(strings.TrimSpace(img.Ref))
		if err != nil {
			return fmt.Errorf("image %q: %w", img.Ref, err)
		}
		if i, ok := seen[ref]; ok {
			out.Images[i].UsedBy = append(out.Images[i].UsedBy, img.UsedBy...)
			continue
		}
		seen[ref] = len(out.Images)
		out.Images = append(out.Images, report.RequiredImage{Ref: ref, UsedBy: img.UsedBy})
	}
	r.mu.Lock()
	r.req = &out
	r.mu.Unlock()
	r.judge(ctx)
	return nil
}

// set is the required set as the reporter last sent it; nil before.
func (r *required) set() *report.RequiredSet {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.req
}

// kick asks for the set to be judged again.
func (r *required) kick() {
	select {
	case r.kicks <- struct{}{}:
	default:
	}
}

// run judges the set when kicked, and when the peer list's next grace ends,
// until ctx ends.
func (r *required) run(ctx context.Context) {
	defer r.timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kicks:
			r.judge(ctx)
		case due := <-r.peers.graceDue():
			r.timer.Reset(max(due.Sub(r.clock.Now()), 0) + 100*time.Millisecond)
		case <-r.timer.C():
			r.judge(ctx)
		}
	}
}

// judge says where each required image stands on the node, keeps it for
// the report and the metric, and records an event for each image that
// became missing, unpinned or pinned again.
func (r *required) judge(ctx context.Context) {
	r.judging.Lock()
	defer r.judging.Unlock()
	set := r.set()
	if set == nil {
		if !r.pull {
			r.peers.schedule(r.peers.update(nil, nil)) // a peer list from before is released
		}
		return
	}
	records, err := r.rt.Records(ctx)
	if err != nil {
		r.log.Warn("listing the records to judge the required images", "error", err)
		return
	}
	imgs := make([]workload.Image, len(set.Images))
	usedBy := map[string][]string{}
	for i, img := range set.Images {
		imgs[i] = workload.Image{Ref: img.Ref}
		usedBy[img.Ref] = img.UsedBy
	}
	held := heldOf(records)
	rep := report.Required{Known: true, Ready: true, Counts: map[report.State]int{}, HeldHash: held.Hash()}
	states := map[string]report.State{}
	verdicts := workload.Judge(imgs, records)
	for _, v := range verdicts {
		states[v.Ref] = v.State
	}
	r.peers.schedule(r.peers.update(set, states))
	for _, v := range verdicts {
		rep.Counts[v.State]++
		if !workload.Ready(v.State, false) {
			rep.Ready = false
			nr := report.Image{Ref: v.Ref, UsedBy: usedBy[v.Ref], State: v.State}
			if r.pull && r.peers.listed(v.Ref) {
				nr.Pulling = true
				rep.Pulling++
				if err := r.pulls.PullFailure(v.Ref); err != nil {
					nr.PullError = err.Error()
				} else if why := r.pulls.Refusal(v.Ref); why != "" {
					nr.PullError = "refused by the signature policy: " + why
				}
			}
			rep.NotReady = append(rep.NotReady, nr)
		}
	}
	sort.Slice(rep.NotReady, func(i, j int) bool { return rep.NotReady[i].Ref < rep.NotReady[j].Ref })
	r.mu.Lock()
	prev := r.states
	r.states, r.report, r.held = states, rep, held
	r.mu.Unlock()
	r.rec.SetRequired(rep.Counts)
	r.recordChanges(set, prev, states)
}

// recordChanges records the events of the images whose state changed
// (workload.Changes).
func (r *required) recordChanges(set *report.RequiredSet, prev, states map[string]report.State) {
	for _, ev := range workload.Changes(set, prev, states) {
		r.journal.Record(ev.Type, ev.Reason, ev.Message)
	}
}

// heldOf is what records say the node holds: every record but the CRI's
// own sha256: ones and those of images' signatures (cosign's tags, the
// referrers tag), which are no images.
func heldOf(records []hfruntime.Image) report.Held {
	held := make(report.Held, 0, len(records))
	for _, r := range records {
		if _, sig := oci.SignedBy(r.Name); !hfruntime.IsCRIRecord(r.Name) && !sig {
			held = append(held, report.HeldImage{Name: r.Name, Digest: r.Target.Digest.String(), Pinned: r.Pinned()})
		}
	}
	held.Sort()
	return held
}

// Held is what the node holds (GET /held), in report.Held's text form, as
// of the last judgment of the required images; ok is false before the
// first.
func (a *Agent) Held() (text []byte, ok bool) { return a.required.heldText() }

func (r *required) heldText() ([]byte, bool) {
	r.mu.Lock()
	held, ok := r.held, r.req != nil && r.report.Known
	r.mu.Unlock()
	return held.Text(), ok // a judgment replaces the list, never changes it
}

// forReport is the report's part on the required images: not Known before
// a reporter sent a set and it was judged.
func (r *required) forReport() *report.Required {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := r.report
	if rep.Counts == nil {
		rep.Counts = map[report.State]int{}
	}
	return &rep
}

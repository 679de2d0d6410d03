package agent

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/holdfast-project/holdfast/internal/journal"
	"github.com/holdfast-project/holdfast/internal/pattern"
	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/workload"
)

// requiredState is what the agent keeps of the images the node's workloads
// need: the set the reporter last sent, and where each stood when last
// judged.
type requiredState struct {
	set    *report.RequiredSet     // nil until a reporter sends one
	states map[string]report.State // ref → state, as last judged
	report report.Required
	held   report.Held // what the node held at the last judgment
}

// SetRequired takes the set of images the node's workloads need (PUT
// /required): each reference normalised; one that does not parse is an
// error naming it, and the set is not taken. The set is judged before it
// returns, and again after every pass and image event.
func (a *Agent) SetRequired(ctx context.Context, set report.RequiredSet) error {
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
	a.mu.Lock()
	a.req.set = &out
	a.mu.Unlock()
	a.judgeRequired(ctx)
	return nil
}

// kickRequired asks the loop to judge the set again.
func (a *Agent) kickRequired() {
	select {
	case a.reqKick <- struct{}{}:
	default:
	}
}

// judgeRequired says where each required image stands on the node, keeps
// it for the report and the metric, and records an event for each image
// that became missing, unpinned or pinned again.
func (a *Agent) judgeRequired(ctx context.Context) {
	a.reqJudge.Lock() // one judgment at a time: each compares with the last
	defer a.reqJudge.Unlock()
	a.mu.Lock()
	set := a.req.set
	a.mu.Unlock()
	if set == nil {
		if !a.cfg.PullRequired {
			a.schedulePeers(a.updatePeers(nil, nil)) // a peer list from before is released
		}
		return
	}
	records, err := a.rt.Records(ctx)
	if err != nil {
		a.log.Warn("listing the records to judge the required images", "error", err)
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
	a.schedulePeers(a.updatePeers(set, states))
	for _, v := range verdicts {
		rep.Counts[v.State]++
		if !workload.Ready(v.State, false) {
			rep.Ready = false
			nr := report.Verdict{RequiredImage: report.RequiredImage{Ref: v.Ref, UsedBy: usedBy[v.Ref]}, State: v.State}
			if a.cfg.PullRequired && a.onPeerList(v.Ref) {
				nr.Pulling = true
				rep.Pulling++
				if err := a.passes.PullFailure(v.Ref); err != nil {
					nr.PullError = err.Error()
				} else if why := a.passes.Refusal(v.Ref); why != "" {
					nr.PullError = "refused by the signature policy: " + why
				}
			}
			rep.NotReady = append(rep.NotReady, nr)
		}
	}
	sort.Slice(rep.NotReady, func(i, j int) bool { return rep.NotReady[i].Ref < rep.NotReady[j].Ref })
	a.mu.Lock()
	prev := a.req.states
	a.req.states, a.req.report, a.req.held = states, rep, held
	a.mu.Unlock()
	a.rec.SetRequired(rep.Counts)
	// Each image whose state changed: an event each, or when many changed
	// at once (a release applied, an images dir emptied), one event for
	// them all, so that the Node gets a few Events, not thousands.
	changed := map[string][]string{} // journal reason → what each image says
	for _, img := range set.Images {
		was, now := prev[img.Ref], states[img.Ref]
		if was == now {
			continue
		}
		who := img.Ref
		if len(img.UsedBy) > 0 {
			who += " (" + img.UsedBy[0]
			if n := len(img.UsedBy) - 1; n > 0 {
				who += fmt.Sprintf(" and %d more", n)
			}
			who += ")"
		}
		switch now {
		case report.Missing, report.Mismatch:
			changed[journal.ReasonImageMissing] = append(changed[journal.ReasonImageMissing], who+" is "+string(now))
		case report.Present:
			changed[journal.ReasonImageUnpinned] = append(changed[journal.ReasonImageUnpinned], who)
		case report.Pinned:
			if was != "" {
				changed[journal.ReasonImageReady] = append(changed[journal.ReasonImageReady], who)
			}
		}
	}
	for _, ev := range []struct {
		reason, typ, one, many string
	}{
		{journal.ReasonImageMissing, journal.Warning, "required image %s on this node: the kubelet would pull it", "%d required images are missing on this node (the kubelet would pull them): %s"},
		{journal.ReasonImageUnpinned, journal.Warning, "required image %s is not pinned: the kubelet's image GC may delete it", "%d required images are not pinned (the kubelet's image GC may delete them): %s"},
		{journal.ReasonImageReady, journal.Normal, "required image %s is pinned", "%d required images are pinned again: %s"},
	} {
		imgs := changed[ev.reason]
		if len(imgs) <= eventEach {
			for _, img := range imgs {
				a.journal.Record(ev.typ, ev.reason, fmt.Sprintf(ev.one, img))
			}
			continue
		}
		a.journal.Record(ev.typ, ev.reason, fmt.Sprintf(ev.many, len(imgs), strings.Join(imgs[:eventEach], ", ")+fmt.Sprintf(" and %d more", len(imgs)-eventEach)))
	}
}

// eventEach is how many images changing state at once get an event each;
// more get one event naming that many of them.
const eventEach = 5

// heldOf is what records say the node holds: every record but the CRI's
// own sha256: ones.
func heldOf(records []runtime.Image) report.Held {
	held := make(report.Held, 0, len(records))
	for _, r := range records {
		if !runtime.IsCRIRecord(r.Name) {
			held = append(held, report.HeldImage{Name: r.Name, Digest: r.Target.Digest.String(), Pinned: r.Pinned()})
		}
	}
	held.Sort()
	return held
}

// Held is what the node holds (GET /held), in report.Held's text form, as
// of the last judgment of the required images; ok is false before the
// first.
func (a *Agent) Held() (text []byte, ok bool) {
	a.mu.Lock()
	held, ok := a.req.held, a.req.set != nil && a.req.report.Known
	a.mu.Unlock()
	return held.Text(), ok // a judgment replaces the list, never changes it
}

// requiredReport is the report's part on the required images: not Known
// before a reporter sent a set and it was judged.
func (a *Agent) requiredReport() *report.Required {
	a.mu.Lock()
	defer a.mu.Unlock()
	rep := a.req.report
	if rep.Counts == nil {
		rep.Counts = map[report.State]int{}
	}
	return &rep
}

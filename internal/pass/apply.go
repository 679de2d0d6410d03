package pass

import (
	"context"
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/journal"
	"github.com/holdfast-project/holdfast/internal/reconcile"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
)

// apply carries a plan out: pins first, then unpins, then releases, so that a
// wanted image is never unpinned and content is never unleased while wanted.
// The names the plan wants are handed to heal (Handoff.Pinned) before any
// unpin, so that heal never fights the pass.
func (p *Runner) apply(ctx context.Context, plan reconcile.Plan, sum *Summary) {
	p.hand.Pinning(pinning(plan))
	sum.Wanted = plan.Wanted
	sum.Images = 0
	for name, w := range plan.WantedNames {
		if !strings.Contains(name, "@") && w.Signs == "" {
			sum.Images++
		}
	}
	sum.Conflicts = plan.Conflicts
	for _, c := range plan.Conflicts {
		p.log.Warn("conflict", "name", c.Name, "winner", c.Winner.Source, "target", c.Winner.Target, "losers", len(c.Losers))
	}
	pinFailed := false
	for _, pin := range plan.Pins {
		if _, err := p.rt.Pin(ctx, pin.Want, hfruntime.FirstPin(pin.Reason == reconcile.ReasonNew)); err != nil {
			sum.Failures = append(sum.Failures, fmt.Errorf("pin %s (wanted by %s): %w", pin.Want.Name, pin.Source, err))
			pinFailed = true
			continue
		}
		switch pin.Reason {
		case reconcile.ReasonNew:
		case reconcile.ReasonDrift:
			sum.Drift++
			sum.Healed++
			p.rec.Drift()
			p.rec.Healed(string(pin.Reason))
			p.log.Warn("restored a re-pointed record", "name", pin.Want.Name, "target", pin.Want.Target.Digest, "source", pin.Source)
		default:
			sum.Healed++
			p.rec.Healed(string(pin.Reason))
			p.log.Info("healed", "name", pin.Want.Name, "reason", pin.Reason, "source", pin.Source)
		}
	}
	p.hand.Pinned(plan.WantedNames, plan.KeptNames)
	for _, u := range plan.Unpins {
		if err := p.rt.Unpin(ctx, u.Name); err != nil {
			sum.Failures = append(sum.Failures, fmt.Errorf("unpin %s: %w", u.Name, err))
			continue
		}
		sum.Unpinned++
		p.log.Info("unpinned", "name", u.Name, "reason", u.Reason)
		p.journal.Record(journal.Normal, journal.ReasonUnpinned, fmt.Sprintf("unpinned %s: %s", u.Name, u.Reason))
	}
	p.rec.Unpinned(sum.Unpinned)
	for _, d := range plan.Deletes {
		if err := p.rt.Delete(ctx, d.Name, digest.Digest(d.Target)); err != nil {
			sum.Failures = append(sum.Failures, fmt.Errorf("delete %s: %w", d.Name, err))
			continue
		}
		sum.Deleted++
		p.log.Info("deleted the record of a refused image", "name", d.Name, "target", d.Target, "reason", d.Reason)
		p.journal.Record(journal.Normal, journal.ReasonUnpinned, fmt.Sprintf("deleted %s, the record holdfast made of an image the signature policy refuses", d.Name))
	}
	p.rec.SetPinned(plan.Wanted)
	for _, h := range plan.Held {
		p.log.Debug("kept while a source is still being written", "lease", h.Lease, "source", h.Source)
	}
	if pinFailed {
		// A lease may hold content a failed pin still needs: keep them all until the next pass.
		return
	}
	for _, r := range plan.Releases {
		if err := p.rt.Release(ctx, r.Lease); err != nil {
			sum.Failures = append(sum.Failures, fmt.Errorf("release %s: %w", r.Lease, err))
			continue
		}
		sum.Released++
		p.log.Info("released", "lease", r.Lease, "source", r.Source, "reason", r.Reason)
		p.journal.Record(journal.Normal, journal.ReasonReleased, fmt.Sprintf("released lease %s of %s: %s", r.Lease, r.Source, r.Reason))
	}
	p.rec.Released(sum.Released)
}

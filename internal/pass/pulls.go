package pass

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/holdfast-project/holdfast/internal/backoff"
	"github.com/holdfast-project/holdfast/internal/reconcile"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/source"
)

// pullAttempts is how often one reference is tried in a pass, with backoff between tries.
const pullAttempts = 3

// pullLists turns each pull list into a source that wants its references.
// A reference that the list wanted and leased before keeps that target, so a
// record someone re-pointed is restored as drift; one whose record is in the
// store is pinned as it is, without pulling; the others are pulled, a few at a
// time, each with a timeout and retries. A bad or unreachable reference is
// reported as file:line and never stops the others, and never drops what the
// list pulled before: an unreachable registry unpins nothing. It also returns
// the lists it could not read or lease: they keep what they had.
func (p *Runner) pullLists(ctx context.Context, lists []source.Source, v *view, sum *Summary, imported map[string]bool) (map[string]reconcile.Present, []string) {
	present := map[string]reconcile.Present{}
	records, states, ok := storeView(v, len(lists), sum)
	if !ok {
		return present, unjudged(lists, sum)
	}
	have := map[string]hfruntime.Want{}
	for _, r := range records {
		have[r.Name] = hfruntime.Want{Name: r.Name, Target: r.Target}
	}
	var unknown []string
	for _, src := range lists {
		pl, err := source.ReadPullList(src.Path)
		if err != nil {
			unknown = append(unknown, listUnread(src, err, sum))
			continue
		}
		failuresBefore := len(sum.Failures)
		for _, le := range pl.Errors {
			sum.Failures = append(sum.Failures, le)
		}
		wants, errs, done := p.resolvePulls(ctx, pl, have, leasedBefore(states, src.Path))
		sum.Failures = append(sum.Failures, errs...)
		leased := p.leaseList(ctx, "pull list", src, src.MtimeNs, wants, v, failuresBefore, sum, imported, present)
		// Only now may what was pulled lose its temporary lease: the list's
		// own holds it, or the GC may take it.
		done()
		if !leased {
			unknown = append(unknown, src.Path)
		}
	}
	return present, unknown
}

// leasedBefore is what the complete leases of the source at path want, by
// name; where two leases (an old identity's and a newer one's) both want a
// name, the newer lease's target.
func leasedBefore(states []hfruntime.SourceState, path string) map[string]hfruntime.Want {
	var mine []hfruntime.SourceState
	for _, st := range states {
		if st.Source == path && st.Complete {
			mine = append(mine, st)
		}
	}
	sort.SliceStable(mine, func(i, j int) bool { return mine[i].CreatedAt.Before(mine[j].CreatedAt) })
	before := map[string]hfruntime.Want{}
	for _, st := range mine {
		for _, w := range st.Images {
			before[w.Name] = w
		}
	}
	return before
}

// resolvePulls finds each entry's target: in what the list leased before,
// in the store, or from its registry. What the list leased comes first: a
// record re-pointed while no agent healed it (ctr tag --force, a pull) is
// drift to restore, never what the list wants from then on. What it pulls
// is held by a temporary lease until done is called: call it once the list's
// own lease holds the content.
func (p *Runner) resolvePulls(ctx context.Context, pl source.PullListFile, have, before map[string]hfruntime.Want) (_ []hfruntime.Want, _ []error, done func()) {
	var (
		mu    sync.Mutex
		wants []hfruntime.Want
		errs  []error
	)
	done = func() {}
	var toPull []source.PullEntry
	for _, e := range pl.Entries {
		if w, ok := before[e.Ref]; ok {
			wants = append(wants, w) // leased before: the pass heals its record
			p.rec.PullDone("present")
			continue
		}
		if w, ok := have[e.Ref]; ok {
			wants = append(wants, w)
			p.rec.PullDone("present")
			continue
		}
		if err, wait := p.pullBackoff(e.Ref); wait {
			errs = append(errs, source.LineError{Path: pl.Path, Line: e.Line, Err: fmt.Errorf("pulling %s: %w%s", e.Ref, err, waitingNote)})
			continue
		}
		if p.actions != nil {
			p.actions.add(Action{Action: "pull", Name: e.Ref, Source: pl.Path, Reason: "not in the store"})
			continue
		}
		toPull = append(toPull, e)
	}
	if len(toPull) > 0 {
		lease, err := p.rt.TempLease(ctx)
		if err != nil {
			return wants, []error{fmt.Errorf("pull list %s: %w", pl.Path, err)}, done
		}
		done = func() { _ = p.rt.Release(context.WithoutCancel(ctx), lease) }
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(4)
		for _, e := range toPull {
			g.Go(func() error {
				w, err := p.pull(gctx, e.Ref, lease)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, source.LineError{Path: pl.Path, Line: e.Line, Err: fmt.Errorf("pulling %s: %w", e.Ref, err)})
					p.rec.PullDone("failed")
					p.notePullFailure(e.Ref, err, pl.Path == p.cfg.PeerList)
					return nil
				}
				p.clearPullFailure(e.Ref)
				p.log.Info("pulled", "ref", e.Ref, "target", w.Target.Digest, "list", pl.Path)
				p.rec.PullDone("pulled")
				wants = append(wants, w)
				return nil
			})
		}
		_ = g.Wait()
		sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	}
	sort.Slice(wants, func(i, j int) bool { return wants[i].Name < wants[j].Name })
	return wants, errs, done
}

// pull tries one reference a few times, with backoff.
func (p *Runner) pull(ctx context.Context, ref, lease string) (hfruntime.Want, error) {
	wait := backoff.New(time.Second, time.Minute)
	var err error
	for attempt := 1; attempt <= pullAttempts; attempt++ {
		var w hfruntime.Want
		w, err = p.rt.Pull(ctx, ref, hfruntime.PullOptions{HostsDir: p.cfg.RegistryConfig, Lease: lease, Timeout: p.cfg.PullTimeout, Credentials: p.credentials})
		if err == nil {
			return w, nil
		}
		if attempt == pullAttempts || ctx.Err() != nil {
			break
		}
		p.log.Debug("pull failed; retrying", "ref", ref, "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return hfruntime.Want{}, ctx.Err()
		case <-time.After(wait.Next()):
		}
	}
	return hfruntime.Want{}, err
}

// pullBackoff reports whether ref failed recently and waits before its next
// try, so that an unreachable registry does not slow every pass down.
func (p *Runner) pullBackoff(ref string) (error, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, ok := p.pullFailed[ref]
	if !ok || p.now().After(f.retryAt) {
		return nil, false
	}
	return f.err, true
}

// notePullFailure has ref wait before its next try: 30 s, doubling to 10
// minutes; from peers, 5 s doubling to a minute. A registry refused or
// unreachable is spared; a peer is on the cluster's own network, and what it
// lacks now a peer may hold in seconds (an archive dropped on another node).
func (p *Runner) notePullFailure(ref string, err error, fromPeers bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, ok := p.pullFailed[ref]
	if !ok {
		f.wait = backoff.New(30*time.Second, 10*time.Minute)
		if fromPeers {
			f.wait = backoff.New(5*time.Second, time.Minute)
		}
	}
	f.retryAt = p.now().Add(f.wait.Next())
	f.err = err
	p.pullFailed[ref] = f
}

func (p *Runner) clearPullFailure(ref string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pullFailed, ref)
}

// credentials answers the registry client from the configured credentials.
func (p *Runner) credentials(host string) (string, string, error) {
	c := p.cfg.Credentials[host]
	return c.Username, c.Password, nil
}

// PullFailure is why ref's last pull failed, while it waits to be tried
// again; nil otherwise.
func (p *Runner) PullFailure(ref string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f, ok := p.pullFailed[ref]; ok && p.now().Before(f.retryAt) {
		return f.err
	}
	return nil
}

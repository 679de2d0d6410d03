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
// time, each with a timeout and retries: beside the pass when the Runner has
// a puller (holdfast run), which the pass asks and never waits for, or within
// the pass (sync). A bad or unreachable reference is reported as file:line
// and never stops the others, and never drops what the list pulled before:
// an unreachable registry unpins nothing. The references of a list of kind
// peers (the peer source, a set's list) come from its owner (Handoff.Peers)
// when it has them, not from its file, each pulled from the holder its
// owner prefers (PeerRefs.Prefer) first. It also
// returns the lists it could not read or lease: they keep what they had.
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
	var (
		unknown []string
		dones   []func(bool)
	)
	// Only once every list's own lease holds it may what was pulled lose
	// its temporary lease, or the GC may take it; two lists may want it.
	defer func() {
		for _, done := range dones {
			done(true)
		}
	}()
	for _, src := range lists {
		pl, keep, err := p.readPullList(src)
		if err != nil {
			unknown = append(unknown, listUnread(src, err, sum))
			continue
		}
		failuresBefore := len(sum.Failures)
		for _, le := range pl.Errors {
			sum.Failures = append(sum.Failures, le)
		}
		wants, errs, done := p.resolvePulls(ctx, pl, keep, have, leasedBefore(states, src.Path))
		sum.Failures = append(sum.Failures, errs...)
		if p.leaseList(ctx, "pull list", src, src.MtimeNs, wants, v, failuresBefore, sum, imported, present) {
			dones = append(dones, done)
		} else {
			done(false)
			unknown = append(unknown, src.Path)
		}
	}
	return present, unknown
}

// readPullList reads the pull list src. The peer source (Config.PeerList)
// and the lists the daemon names in Handoff.Peers are of kind Peers, whose
// references come from the daemon that owns them when it gave them: a line
// added to such a file by hand is not obeyed. keep are the references to
// keep only as the list leased them before, never to pull or pin anew.
func (p *Runner) readPullList(src source.Source) (_ source.PullListFile, keep map[string]bool, _ error) {
	own, named := p.peers[src.Path]
	switch {
	case own.Known:
		return source.PullListFile{Path: src.Path, Kind: source.Peers, Entries: own.Entries}, own.Keep, nil
	case named || src.Path == p.cfg.PeerList:
		pl, err := source.ReadPeerList(src.Path)
		return pl, nil, err
	}
	pl, err := source.ReadPullList(src.Path)
	return pl, nil, err
}

// ownPeerList says whether src is a list of kind peers whose owner gave its
// references for this pass.
func (p *Runner) ownPeerList(src source.Source) bool {
	return p.peers[src.Path].Known
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
// drift to restore, never what the list wants from then on. An entry in
// keep is kept as leased before, and otherwise left out. What it pulls is
// held by a temporary lease until done is called: call it once the list's
// own lease holds the content (leased), or failed to.
func (p *Runner) resolvePulls(ctx context.Context, pl source.PullListFile, keep map[string]bool, have, before map[string]hfruntime.Want) (_ []hfruntime.Want, _ []error, done func(leased bool)) {
	var (
		mu     sync.Mutex
		wants  []hfruntime.Want
		errs   []error
		taken  []string // pulled beside the pass, taken now
		toPull []source.PullEntry
	)
	done = func(bool) {}
	fromPeers := pl.Kind == source.Peers
	prefer := p.peers[pl.Path].Prefer
	for _, e := range pl.Entries {
		if w, ok := before[e.Ref]; ok {
			wants = append(wants, w) // leased before: the pass heals its record
			p.rec.PullDone("present")
			continue
		}
		if keep[e.Ref] {
			continue
		}
		if w, ok := have[e.Ref]; ok {
			wants = append(wants, w)
			p.rec.PullDone("present")
			continue
		}
		if p.bg != nil {
			st := p.bg.ask(e.Ref, fromPeers, prefer[e.Ref])
			switch {
			case st.ok:
				p.log.Info("pulled", "ref", e.Ref, "target", st.want.Target.Digest, "list", pl.Path)
				p.rec.PullDone("pulled")
				wants = append(wants, st.want)
				taken = append(taken, e.Ref)
			case st.err != nil:
				errs = append(errs, source.LineError{Path: pl.Path, Line: e.Line, Err: fmt.Errorf("pulling %s: %w%s", e.Ref, st.err, waitingNote)})
			}
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
	if len(taken) > 0 {
		done = func(leased bool) {
			if leased {
				p.bg.taken(ctx, taken)
			}
		}
	}
	if len(toPull) > 0 {
		lease, err := p.rt.TempLease(ctx)
		if err != nil {
			return wants, []error{fmt.Errorf("pull list %s: %w", pl.Path, err)}, done
		}
		done = func(bool) { _ = p.rt.Release(context.WithoutCancel(ctx), lease) }
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(pullConcurrency)
		for _, e := range toPull {
			g.Go(func() error {
				w, err := p.pull(gctx, e.Ref, lease, prefer[e.Ref])
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, source.LineError{Path: pl.Path, Line: e.Line, Err: fmt.Errorf("pulling %s: %w", e.Ref, err)})
					p.rec.PullDone("failed")
					p.notePullFailure(e.Ref, err, fromPeers)
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
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	sort.Slice(wants, func(i, j int) bool { return wants[i].Name < wants[j].Name })
	return wants, errs, done
}

// pull tries one reference a few times, with backoff, within a pass; its
// content first from the peer mirror prefer, when set.
func (p *Runner) pull(ctx context.Context, ref, lease, prefer string) (hfruntime.Want, error) {
	wait := backoff.New(time.Second, time.Minute)
	var err error
	for attempt := 1; attempt <= pullAttempts; attempt++ {
		var w hfruntime.Want
		w, err = p.pullOnce(ctx, ref, lease, prefer)
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

// pullOnce tries one reference once, with the pull's timeout, its content
// first from the peer mirror prefer, when set.
func (p *Runner) pullOnce(ctx context.Context, ref, lease, prefer string) (hfruntime.Want, error) {
	return p.rt.Pull(ctx, ref, hfruntime.PullOptions{HostsDir: p.cfg.RegistryConfig, Lease: lease, Timeout: p.cfg.PullTimeout,
		Credentials: p.credentials, Log: p.log, Prefer: prefer})
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
	if p.bg != nil {
		return p.bg.failure(ref)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if f, ok := p.pullFailed[ref]; ok && p.now().Before(f.retryAt) {
		return f.err
	}
	return nil
}

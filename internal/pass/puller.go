package pass

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-project/holdfast/internal/backoff"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
)

// The puller pulls the references of pull lists beside the passes (holdfast
// run), so that no pull ever holds a pass: a pass asks for the references
// its lists lack and takes those already pulled, and never waits. A pull
// that completes brings on a pass, which pins and leases what it pulled as
// its list's, as a pass that pulled it itself would. One-shot passes (sync,
// plan) have no puller and pull within the pass (resolvePulls).
//
// Each reference is pulled once at a time, a few at a time in all, each
// under its own temporary lease and with the pull's timeout. One that fails
// is tried again 1 s, then 2 s later, then after its list's backoff (see
// retryAfter), counted from the end of its last try, so that a failing
// reference is tried a few times a minute at most however many there are,
// and passes do not try it at all.

// pullConcurrency is how many pulls run at once.
const pullConcurrency = 4

// puller is what the Runner of the daemon pulls with.
type puller struct {
	pull     func(ctx context.Context, ref, lease, prefer string) (hfruntime.Want, error) // one try
	lease    func(ctx context.Context) (string, error)
	release  func(ctx context.Context, lease string)
	now      func() time.Time
	rec      Recorder
	onPulled func() // a pull completed, or failed its first tries: a pass may take it

	mu   sync.Mutex
	refs map[string]*pullRef
	wake chan struct{}
}

// pullRef is where one reference's pull stands.
type pullRef struct {
	fromPeers bool
	prefer    string             // the peer mirror its next try fetches from first, as last asked
	asked     bool               // a pass asked for it since the last sweep
	cancel    context.CancelFunc // while its pull runs
	pulled    *hfruntime.Want    // pulled, held by lease, until a pass takes it
	lease     string
	failures  int // tries that failed in a row
	retryAt   time.Time
	err       error
}

// pullStatus is what a pass learns of a reference from the puller.
type pullStatus struct {
	want  hfruntime.Want // pulled: the pass may lease it
	ok    bool
	err   error // its last tries failed: it waits before the next one
	fresh bool  // asked for the first time: not pulled yet
}

// ask says where ref stands, and asks for it to be pulled unless it is;
// its next try fetches first from the peer mirror prefer, when set.
func (pl *puller) ask(ref string, fromPeers bool, prefer string) pullStatus {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	r, ok := pl.refs[ref]
	if !ok {
		r = &pullRef{fromPeers: fromPeers}
		pl.refs[ref] = r
		pl.kick()
	}
	r.asked = true
	r.fromPeers, r.prefer = fromPeers, prefer
	switch {
	case r.pulled != nil:
		return pullStatus{want: *r.pulled, ok: true}
	case r.failures >= pullAttempts:
		return pullStatus{err: r.err}
	}
	return pullStatus{fresh: !ok}
}

// taken forgets refs, pulled and now held by their list's own lease, and
// releases their temporary leases.
func (pl *puller) taken(ctx context.Context, refs []string) {
	var leases []string
	pl.mu.Lock()
	for _, ref := range refs {
		if r, ok := pl.refs[ref]; ok && r.pulled != nil {
			leases = append(leases, r.lease)
			delete(pl.refs, ref)
		}
	}
	pl.mu.Unlock()
	for _, l := range leases {
		pl.release(context.WithoutCancel(ctx), l)
	}
}

// sweep forgets the references no pass asked for since the last sweep: no
// list names them any more. A pull of one that runs is cancelled, and what
// one pulled is let go.
func (pl *puller) sweep(ctx context.Context) {
	var leases []string
	pl.mu.Lock()
	for ref, r := range pl.refs {
		if r.asked {
			r.asked = false
			continue
		}
		if r.cancel != nil {
			r.cancel()
		}
		if r.pulled != nil {
			leases = append(leases, r.lease)
		}
		delete(pl.refs, ref)
	}
	pl.mu.Unlock()
	for _, l := range leases {
		pl.release(context.WithoutCancel(ctx), l)
	}
}

// failure is why ref's last tries failed, while it waits for the next; nil
// otherwise.
func (pl *puller) failure(ref string) error {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if r, ok := pl.refs[ref]; ok && r.pulled == nil && r.failures >= pullAttempts {
		return r.err
	}
	return nil
}

func (pl *puller) kick() {
	select {
	case pl.wake <- struct{}{}:
	default:
	}
}

// run pulls what passes ask for until ctx ends; then it waits for the pulls
// it started, and lets go of what no pass took.
func (pl *puller) run(ctx context.Context) {
	var running sync.WaitGroup
	done := make(chan struct{}, pullConcurrency)
	inFlight := 0
	timer := time.NewTimer(time.Hour)
	defer func() {
		timer.Stop()
		running.Wait()
		pl.mu.Lock()
		var leases []string
		for _, r := range pl.refs {
			if r.pulled != nil {
				leases = append(leases, r.lease)
			}
		}
		pl.refs = map[string]*pullRef{}
		pl.mu.Unlock()
		for _, l := range leases {
			pl.release(context.WithoutCancel(ctx), l)
		}
	}()
	for {
		due, next := pl.due(pullConcurrency - inFlight)
		for _, ref := range due {
			inFlight++
			running.Go(func() {
				pl.try(ctx, ref)
				done <- struct{}{}
			})
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if !next.IsZero() {
			timer.Reset(max(next.Sub(pl.now()), time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return
		case <-done:
			inFlight--
		case <-pl.wake:
		case <-timer.C:
		}
	}
}

// due picks up to n references whose next try is due, the longest waiting
// first, marks them running and returns them; and when the next one not
// yet due is (zero if none).
func (pl *puller) due(n int) (due []string, next time.Time) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	now := pl.now()
	var ready []string
	for ref, r := range pl.refs {
		if r.cancel != nil || r.pulled != nil {
			continue
		}
		if r.retryAt.After(now) {
			if next.IsZero() || r.retryAt.Before(next) {
				next = r.retryAt
			}
			continue
		}
		ready = append(ready, ref)
	}
	slices.SortFunc(ready, func(a, b string) int {
		if c := pl.refs[a].retryAt.Compare(pl.refs[b].retryAt); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	if len(ready) > n {
		// What waits is due now: the next check comes when a pull ends.
		ready = ready[:max(n, 0)]
	}
	for _, ref := range ready {
		pl.refs[ref].cancel = func() {}
	}
	return ready, next
}

// try pulls ref once, under a lease of its own.
func (pl *puller) try(ctx context.Context, ref string) {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pl.mu.Lock()
	r, ok := pl.refs[ref]
	if !ok { // swept before it started
		pl.mu.Unlock()
		return
	}
	r.cancel = cancel
	prefer := r.prefer
	pl.mu.Unlock()

	lease, err := pl.lease(pctx)
	var w hfruntime.Want
	if err == nil {
		w, err = pl.pull(pctx, ref, lease, prefer)
		if err != nil {
			pl.release(context.WithoutCancel(ctx), lease)
		}
	}
	pl.mu.Lock()
	if cur, ok := pl.refs[ref]; !ok || cur != r || pctx.Err() != nil {
		// Swept while it ran, or the agent stops: nobody takes it.
		pl.mu.Unlock()
		if err == nil {
			pl.release(context.WithoutCancel(ctx), lease)
		}
		return
	}
	r.cancel = nil
	if err != nil {
		r.failures++
		r.err = err
		r.retryAt = pl.now().Add(retryAfter(r.failures, r.fromPeers))
		failed := r.failures == pullAttempts
		pl.mu.Unlock()
		pl.rec.PullDone("failed")
		if failed {
			pl.onPulled() // a pass and the report say it failed
		}
		return
	}
	r.pulled, r.lease, r.failures, r.err = &w, lease, 0, nil
	pl.mu.Unlock()
	pl.onPulled()
}

// retryAfter is how long a reference waits after its failures-th failed try
// in a row: 1 s, then 2 s (a registry's hiccup); then 30 s doubling to 10
// minutes for a pull list, to spare a registry that refuses or is down; 5 s
// doubling to a minute for the peer source, as a peer is on the cluster's
// own network and what no peer holds now one may hold in seconds.
func retryAfter(failures int, fromPeers bool) time.Duration {
	switch failures {
	case 1:
		return time.Second
	case 2:
		return 2 * time.Second
	}
	b := backoff.New(30*time.Second, 10*time.Minute)
	if fromPeers {
		b = backoff.New(5*time.Second, time.Minute)
	}
	var d time.Duration
	for range failures - 2 {
		d = b.Next()
		if d == b.Most {
			break
		}
	}
	return d
}

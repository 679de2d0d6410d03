package agent

import (
	"context"
	"log/slog"
	"time"

	"github.com/holdfast-project/holdfast/internal/pass"
)

// loop runs the passes, one at a time, as triggers come: each trigger that
// comes while a pass runs brings on one more pass after it, however many
// come. It says when a pass is done, when a pull beside the passes completed
// and when the next retry is due.
type loop struct {
	clock   Clock
	log     *slog.Logger
	trigger chan string   // why the next pass runs; one waits at most
	passed  chan passDone // a pass is done
	pulls   chan struct{} // a pull beside the passes completed: run a pass
	retry   Timer         // when a pending source, a failed import or a failed pull is due
}

// passDone is what the loop learns of a pass: its result, and the names of
// the image events that came while it ran, which heal takes up once the
// pass has handed over its wanted set.
type passDone struct {
	pass.Result
	touched map[string]bool
}

func newLoop(clock Clock, log *slog.Logger) *loop {
	return &loop{clock: clock, log: log, trigger: make(chan string, 1), passed: make(chan passDone, 1),
		pulls: make(chan struct{}, 1), retry: clock.NewTimer()}
}

// kick asks for a pass, unless one is asked for already.
func (l *loop) kick(why string) {
	select {
	case l.trigger <- why:
	default:
	}
}

// pulled says a pull beside the passes completed (pass.WithBackgroundPulls).
func (l *loop) pulled() {
	select {
	case l.pulls <- struct{}{}:
	default:
	}
}

// pullDone receives when a pull beside the passes completed.
func (l *loop) pullDone() <-chan struct{} { return l.pulls }

// done receives each pass's outcome.
func (l *loop) done() <-chan passDone { return l.passed }

// retryDue receives when the retry set by retryAt is due.
func (l *loop) retryDue() <-chan time.Time { return l.retry.C() }

// retryAt sets the next retry to next, a little after it; none when zero.
func (l *loop) retryAt(next time.Time) {
	if next.IsZero() {
		l.retry.Stop()
		return
	}
	l.retry.Reset(max(next.Sub(l.clock.Now())+100*time.Millisecond, 100*time.Millisecond))
}

// run runs passes one at a time as triggers arrive, until ctx ends; touched
// gives the names of the image events that came while a pass ran.
func (l *loop) run(ctx context.Context, passes *pass.Runner, touched func() map[string]bool) {
	defer l.retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case why := <-l.trigger:
			sum, res := passes.Run(ctx, pass.Options{Settle: true, Memo: why != "resync"})
			for _, f := range sum.Failures {
				l.log.Error("pass", "error", f)
			}
			l.log.Info("pass: "+sum.String(), "trigger", why, "pending", len(res.Pending))
			select {
			case l.passed <- passDone{Result: res, touched: touched()}:
			case <-ctx.Done():
				return
			}
		}
	}
}

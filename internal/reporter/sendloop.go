package reporter

import (
	"context"
	"log/slog"
	"time"
)

// sendLoop is how the required set and the ImageSets reach the agent: a
// send at once, then one after each change has settled (debounce), again
// after interval when the agent did not take it, and a forced one when the
// agent asks (it restarted and has none). The same failure is logged once at
// warning level, then at debug level until another comes.
type sendLoop struct {
	what               string // "the required images", "the ImageSets"
	agent              string
	log                *slog.Logger
	changed, resend    <-chan struct{}
	debounce, interval time.Duration
	send               func(ctx context.Context, force bool) error

	failed string // the last send's error
}

// run sends until ctx ends; force forces the first send.
func (l *sendLoop) run(ctx context.Context, force bool) {
	timer := time.NewTimer(0) // the first round: now
	defer timer.Stop()
	pending := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.changed:
			if !pending {
				pending = true
				timer.Reset(l.debounce)
			}
			continue
		case <-l.resend:
			force = true
			if !pending {
				pending = true
				timer.Reset(0)
			}
			continue
		case <-timer.C:
		}
		pending = false
		if err := l.send(ctx, force); err != nil {
			if ctx.Err() != nil {
				return
			}
			level := slog.LevelWarn
			if err.Error() == l.failed {
				level = slog.LevelDebug
			}
			l.failed = err.Error()
			l.log.Log(ctx, level, "sending "+l.what+" to the agent; trying again", "agent", l.agent, "in", l.interval.String(), "error", err)
			pending = true
			timer.Reset(l.interval)
			continue
		}
		l.failed = ""
		force = false
	}
}

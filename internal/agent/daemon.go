package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/holdfast-project/holdfast/internal/notify"
)

// ShutdownTimeout bounds how long Daemon waits for the daemon's parts after
// the agent has stopped or one of them failed.
const ShutdownTimeout = 20 * time.Second

// errStopped is why the daemon's other parts end once the agent has stopped.
var errStopped = errors.New("the agent stopped")

// Daemon runs the agent (Run) as the node's daemon, with its other parts
// (the server, the data dir's keeper, the embedded containerd's watch) under
// one group. The first to fail stops the others, and the agent's end
// (SIGTERM) stops them all; the rest then get ShutdownTimeout to end, and
// Daemon returns anyway. It tells the service manager that the agent is ready
// once every source of the first pass is final (after onReady), extends the
// start-up until then so that a long first pass is not killed, and says that
// it stops.
func (a *Agent) Daemon(ctx context.Context, onReady func(), parts ...func(context.Context) error) error {
	g, gctx := errgroup.WithContext(ctx)
	runCtx, stop := context.WithCancelCause(gctx)
	defer stop(nil)
	for _, part := range parts {
		g.Go(func() error { return part(runCtx) })
	}
	g.Go(func() error { a.extendUntilReady(runCtx); return nil })
	g.Go(func() error {
		defer stop(errStopped)
		return a.Run(runCtx, func() {
			onReady()
			_ = notify.Ready()
		})
	})
	err := waitBounded(runCtx, g, ShutdownTimeout)
	_ = notify.Stopping()
	return err
}

// waitBounded waits for g. Once ctx is done (SIGTERM, a part of g failed, or
// the agent ended), the rest get limit to end too; it then returns anyway.
func waitBounded(ctx context.Context, g *errgroup.Group, limit time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		return fmt.Errorf("stopping: the agent's parts did not end within %s", limit)
	}
}

// extendUntilReady tells systemd every 10 s that the first pass is still
// going, so a long one is not killed, until the agent is ready.
func (a *Agent) extendUntilReady(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		if ok, _ := a.Ready(); ok {
			return
		}
		_ = notify.Extend(30 * time.Second)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

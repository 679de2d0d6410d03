package datadir

import (
	"context"
	"time"
)

// Guard keeps the lock until ctx ends: every second it calls Keep. A data dir
// deleted under its owner (rm -rf) would leave it holding a lock on a
// deleted file, and another writer could then run beside it. restored is
// called each time Keep made the dir and its lock again, for the owner to
// make again what else it keeps there; lost gets Keep's error the first time
// it fails, not again until a Keep has succeeded.
func (l *Lock) Guard(ctx context.Context, lost func(error), restored func()) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		again, err := l.Keep()
		if err != nil {
			if !failing {
				lost(err)
			}
			failing = true
			continue
		}
		failing = false
		if again {
			restored()
		}
	}
}

package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
)

// TestWaitBounded: once ctx is done, a part that does not end gets the limit
// and no more; parts that end return what they return.
func TestWaitBounded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	block := make(chan struct{})
	defer close(block)
	var g errgroup.Group
	g.Go(func() error { <-block; return nil })
	cancel()
	start := time.Now()
	err := waitBounded(ctx, &g, 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not end within 50ms") {
		t.Errorf("waitBounded = %v, want the parts not ending within the limit", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("waitBounded took %s past a 50ms limit", el)
	}

	var ended errgroup.Group
	ended.Go(func() error { return nil })
	if err := waitBounded(context.Background(), &ended, time.Minute); err != nil {
		t.Errorf("waitBounded of parts that ended = %v", err)
	}
}

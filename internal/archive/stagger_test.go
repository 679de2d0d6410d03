package archive

import (
	"context"
	"testing"
)

func gateOpen(s *stagger, k int) bool {
	if k == 0 {
		return true
	}
	select {
	case <-s.gates[k-1]:
		return true
	default:
		return false
	}
}

func TestStaggerOpensOneWorkerPerStep(t *testing.T) {
	const mib = 1 << 20
	s := newStagger(4, 64*mib) // a step is 16 MiB
	want := func(open ...bool) {
		t.Helper()
		for k, w := range open {
			if got := gateOpen(s, k); got != w {
				t.Fatalf("after %d bytes: worker %d may start = %v, want %v", s.bytes.Load(), k, got, w)
			}
		}
	}
	want(true, false, false, false)
	s.add(16*mib - 1)
	want(true, false, false, false)
	s.add(1)
	want(true, true, false, false)
	s.add(40 * mib) // 56 MiB: three steps
	want(true, true, true, true)
	if err := s.wait(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
}

func TestStaggerWaitEndsWithContextOrOpenAll(t *testing.T) {
	s := newStagger(3, 64<<20)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.wait(ctx, 2); err == nil {
		t.Fatal("wait on a closed gate with a cancelled context returned nil")
	}
	s.openAll()
	s.openAll() // twice is harmless
	if err := s.wait(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
}

func TestStaggerLeavesSmallBlobsAlone(t *testing.T) {
	s := newStagger(4, minStagger-1)
	for k := range 4 {
		if !gateOpen(s, k) {
			t.Fatalf("worker %d waits for blobs under %d bytes", k, minStagger)
		}
	}
}

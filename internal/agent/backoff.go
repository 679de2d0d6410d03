package agent

import "time"

// backoff is a delay that starts at first and doubles at each step, up to
// most: the one shape of every wait between tries in the agent (a failed
// import, a failed pull, a heal that keeps being undone, containerd not
// answering, the CRI not seeing a pin yet).
type backoff struct {
	first, most time.Duration
	cur         time.Duration // the last delay next gave; 0 before the first
}

// next is the delay before the next try: first, then twice the one before,
// at most most.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.first
	} else {
		b.cur = min(b.cur*2, b.most)
	}
	return b.cur
}

// reset makes the next delay first again.
func (b *backoff) reset() { b.cur = 0 }

// started says whether next has been called since the last reset.
func (b *backoff) started() bool { return b.cur != 0 }

// Package backoff is the one shape of every wait between tries in holdfast:
// a failed import, a failed pull, a heal that keeps being undone, containerd
// not answering, the CRI not seeing a pin yet.
package backoff

import "time"

// Backoff is a delay that starts at First and doubles at each step, up to
// Most. The zero value of its progress is "not started".
type Backoff struct {
	First, Most time.Duration
	cur         time.Duration // the last delay Next gave; 0 before the first
}

// New is a backoff from first up to most.
func New(first, most time.Duration) Backoff { return Backoff{First: first, Most: most} }

// Next is the delay before the next try: First, then twice the one before,
// at most Most.
func (b *Backoff) Next() time.Duration {
	if b.cur == 0 {
		b.cur = b.First
	} else {
		b.cur = min(b.cur*2, b.Most)
	}
	return b.cur
}

// Reset makes the next delay First again.
func (b *Backoff) Reset() { b.cur = 0 }

// Started says whether Next has been called since the last Reset.
func (b *Backoff) Started() bool { return b.cur != 0 }

package agent

import "time"

// Clock is the time the agent decides backoffs and retries by. The agent uses
// the real clock; a test hands it one it moves by hand, so that it can check
// what the agent decides at each moment without waiting for it.
type Clock interface {
	Now() time.Time
	// NewTimer makes a stopped timer.
	NewTimer() Timer
}

// Timer is a one-shot timer of a Clock.
type Timer interface {
	C() <-chan time.Time
	// Reset (re)arms the timer to fire once after d.
	Reset(d time.Duration)
	Stop()
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer() Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return realTimer{t}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop()                 { r.t.Stop() }

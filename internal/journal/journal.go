// Package journal keeps what the agent did that an operator should hear of, for
// GET /report (report.Report): a bounded ring of events (a source that newly fails, a name
// entering heal backoff, names unpinned, leases released) and a summary kept
// current at the end of each pass and heal. Recording takes a mutex and never
// waits for a reader: a pass is never held up by the reporter.
package journal

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/holdfast-project/holdfast/internal/report"
)

// DefaultSize is how many events the agent's journal keeps.
const DefaultSize = 512

// Event types and reasons.
const (
	Normal  = "Normal"
	Warning = "Warning"

	ReasonSourceFailed = "SourceFailed"
	ReasonHealBackoff  = "HealBackoff"
	ReasonUnpinned     = "Unpinned"
	ReasonReleased     = "Released"
	// ReasonFeatureOff: a path a feature needs is missing on the node, so the
	// agent runs without the feature (it says which, and why).
	ReasonFeatureOff = "FeatureOff"
	// ReasonPolicy: the signature policy file is bad; the last good one
	// stays in force.
	ReasonPolicy = "SignaturePolicy"
	// A required image (one the node's workloads need) became missing or
	// unpinned, or pinned again.
	ReasonImageMissing  = "ImageMissing"
	ReasonImageUnpinned = "ImageUnpinned"
	ReasonImageReady    = "ImageReady"
)

// Journal is the ring and the summary. Its zero value is not usable: use New.
type Journal struct {
	now     func() time.Time
	started time.Time // by the wall clock, whatever now is: it tells journals apart

	mu      sync.Mutex
	ring    []report.Event // capacity fixed at New; oldest at start
	start   int
	next    uint64
	pinned  int
	sources int
	failing map[string]string    // source → cause, as the last pass left it
	backoff map[string]time.Time // name → end of its heal backoff
}

// New makes a journal that keeps the last size events (at least 1); now
// stamps them.
func New(size int, now func() time.Time) *Journal {
	if now == nil {
		now = time.Now
	}
	return &Journal{now: now, started: time.Now(), ring: make([]report.Event, 0, max(size, 1)), next: 1,
		failing: map[string]string{}, backoff: map[string]time.Time{}}
}

// Record appends an event, dropping the oldest when the ring is full.
func (j *Journal) Record(typ, reason, message string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.recordLocked(typ, reason, message)
}

func (j *Journal) recordLocked(typ, reason, message string) {
	ev := report.Event{Seq: j.next, Time: j.now().UTC(), Type: typ, Reason: reason, Message: message}
	j.next++
	if len(j.ring) < cap(j.ring) {
		j.ring = append(j.ring, ev)
		return
	}
	j.ring[j.start] = ev
	j.start = (j.start + 1) % len(j.ring)
}

// Passed keeps the summary of a pass: the names pinned, the sources seen,
// and the sources failing now. A source failing for the first time, again
// after it had recovered, or with another cause than last time, is recorded
// as a SourceFailed event; one failing as before is not.
func (j *Journal) Passed(pinned, sources int, failing []report.Failure) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.pinned, j.sources = pinned, sources
	now := make(map[string]string, len(failing))
	for _, f := range failing {
		now[f.Source] = f.Error
	}
	for _, src := range slices.Sorted(maps.Keys(now)) {
		cause := now[src]
		if prev, ok := j.failing[src]; ok && prev == cause {
			continue
		}
		msg := cause
		if src != "" {
			msg = src + ": " + cause
		}
		j.recordLocked(Warning, ReasonSourceFailed, msg)
	}
	j.failing = now
}

// Backoff says that name waits until until before its next heal: the report
// lists it until then. The agent records a HealBackoff event itself when a
// name enters backoff.
func (j *Journal) Backoff(name string, until time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.backoff[name] = until
}

// Report returns the summary and the events with a sequence number above
// after, oldest first. ready is the agent's readiness, which it keeps itself.
func (j *Journal) Report(after uint64, ready bool) report.Report {
	j.mu.Lock()
	defer j.mu.Unlock()
	r := report.Report{Ready: ready, Pinned: j.pinned, Sources: j.sources, Next: j.next, Started: j.started,
		Failing: []report.Failure{}, HealBackoff: []string{}, Events: []report.Event{}}
	for src, cause := range j.failing {
		r.Failing = append(r.Failing, report.Failure{Source: src, Error: cause})
	}
	slices.SortFunc(r.Failing, func(a, b report.Failure) int { return cmp.Compare(a.Source, b.Source) })
	now := j.now()
	for name, until := range j.backoff {
		if now.Before(until) {
			r.HealBackoff = append(r.HealBackoff, name)
		} else {
			delete(j.backoff, name)
		}
	}
	slices.Sort(r.HealBackoff)
	for i := range j.ring {
		ev := j.ring[(j.start+i)%len(j.ring)]
		if ev.Seq > after {
			r.Events = append(r.Events, ev)
		}
	}
	return r
}

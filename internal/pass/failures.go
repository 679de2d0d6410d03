package pass

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-project/holdfast/internal/backoff"
	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/source"
)

// What fails in a pass: each failure names its source, and the Runner
// remembers the sources whose import failed, to retry them with backoff.

type failure struct {
	identity string
	retryAt  time.Time
	wait     backoff.Backoff
	err      error
}

// noteFailure remembers a failed source, and why, so that the loop retries it
// with backoff, or at once when it changes.
func (p *Runner) noteFailure(path, identity string, cause error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.failed[path]
	if f.identity != identity || !f.wait.Started() {
		f = failure{identity: identity, wait: backoff.New(5*time.Second, 5*time.Minute)}
	}
	f.retryAt = p.now().Add(f.wait.Next())
	f.err = cause
	p.failed[path] = f
}

// failedUntil says until when a source that failed at this identity waits
// before its next try.
func (p *Runner) failedUntil(path, identity string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, ok := p.failed[path]
	if !ok || f.identity != identity || !f.retryAt.After(p.now()) {
		return time.Time{}, false
	}
	return f.retryAt, true
}

// nextRetry is the earliest time a failure still waits for: of a scanned
// source whose import failed, or of a pull list reference. Zero if none.
// The failures of sources that are gone are forgotten.
func (p *Runner) nextRetry(srcs []source.Source) time.Time {
	scanned := map[string]bool{}
	for _, s := range srcs {
		scanned[s.Path] = true
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	var next time.Time
	for path, f := range p.failed {
		if !scanned[path] {
			delete(p.failed, path) // a source that is gone
			continue
		}
		if f.retryAt.After(now) && (next.IsZero() || f.retryAt.Before(next)) {
			next = f.retryAt
		}
	}
	for _, f := range p.pullFailed {
		if f.retryAt.After(now) && (next.IsZero() || f.retryAt.Before(next)) {
			next = f.retryAt
		}
	}
	return next
}

func (p *Runner) clearFailure(path string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.failed, path)
}

// sourceError is a failure of one source: its text is the whole error, and
// cause is the part that says why, without the source's name.
type sourceError struct {
	source string
	cause  error
	err    error
}

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// sourceFailed marks err as the failure of the source at path, for the
// reason cause.
func sourceFailed(path string, cause, err error) error {
	return &sourceError{source: path, cause: cause, err: err}
}

// causeOf is why err failed, without the name of its source when it has one.
func causeOf(err error) error {
	var se *sourceError
	if errors.As(err, &se) {
		return se.cause
	}
	return err
}

// waitingNote ends a pull failure a pass does not try again yet.
const waitingNote = " (waiting before the next try)"

// failing is what fails after a pass: the failures the pass met, by source
// (the lines of a list together), and the sources whose import failed before
// and waits for its retry. A failure that names no source has none.
func (p *Runner) failing(errs []error) []report.Failure {
	bySource := map[string][]string{}
	for _, err := range errs {
		src, cause := "", err.Error()
		var se *sourceError
		var le source.LineError
		switch {
		case errors.As(err, &se):
			src, cause = se.source, se.cause.Error()
		case errors.As(err, &le):
			src, cause = le.Path, "line "+strconv.Itoa(le.Line)+": "+strings.TrimSuffix(le.Err.Error(), waitingNote)
		}
		bySource[src] = append(bySource[src], cause)
	}
	p.mu.Lock()
	for path, f := range p.failed {
		if _, ok := bySource[path]; ok || f.err == nil {
			continue
		}
		bySource[path] = []string{f.err.Error()}
	}
	p.mu.Unlock()
	out := make([]report.Failure, 0, len(bySource))
	for _, src := range slices.Sorted(maps.Keys(bySource)) {
		causes := bySource[src]
		slices.Sort(causes)
		out = append(out, report.Failure{Source: src, Error: strings.Join(slices.Compact(causes), "; ")})
	}
	return out
}

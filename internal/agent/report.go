package agent

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/holdfast-project/holdfast/internal/journal"
	"github.com/holdfast-project/holdfast/internal/source"
)

// Report is what GET /report tells: the summary of the last pass and heals,
// and the journal's events with a sequence number above after.
func (a *Agent) Report(after uint64) journal.Report {
	ready, _ := a.Ready()
	return a.journal.Report(after, ready)
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
func (a *Agent) failing(errs []error) []journal.Failure {
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
	a.mu.Lock()
	for path, f := range a.failed {
		if _, ok := bySource[path]; ok || f.err == nil {
			continue
		}
		bySource[path] = []string{f.err.Error()}
	}
	a.mu.Unlock()
	out := make([]journal.Failure, 0, len(bySource))
	for _, src := range slices.Sorted(maps.Keys(bySource)) {
		causes := bySource[src]
		slices.Sort(causes)
		out = append(out, journal.Failure{Source: src, Error: strings.Join(slices.Compact(causes), "; ")})
	}
	return out
}

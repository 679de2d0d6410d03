package pass

import (
	"time"

	"github.com/holdfast-project/holdfast/internal/metrics"
)

// Recorder receives what passes do, for metrics. *metrics.Metrics is one.
type Recorder interface {
	ImportDone(result string, bytes int64, d time.Duration)
	PullDone(result string)
	Healed(cause string)
	Drift()
	Unpinned(n int)
	Released(n int)
	SetPinned(n int)
	ReconcileDone(d time.Duration, ok bool)
	SetSources(counts map[metrics.SourceKey]int)
	// SetSignatures counts the wanted images by signature verdict state.
	SetSignatures(counts map[string]int)
}

// NoRecorder records nothing.
type NoRecorder struct{}

func (NoRecorder) ImportDone(string, int64, time.Duration) {}
func (NoRecorder) PullDone(string)                         {}
func (NoRecorder) Healed(string)                           {}
func (NoRecorder) Drift()                                  {}
func (NoRecorder) Unpinned(int)                            {}
func (NoRecorder) Released(int)                            {}
func (NoRecorder) SetPinned(int)                           {}
func (NoRecorder) ReconcileDone(time.Duration, bool)       {}
func (NoRecorder) SetSources(map[metrics.SourceKey]int)    {}
func (NoRecorder) SetSignatures(map[string]int)            {}

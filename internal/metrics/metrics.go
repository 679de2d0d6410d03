// Package metrics holds holdfast's Prometheus collectors. The agent reports
// through the methods of *Metrics and never touches Prometheus types; a nil
// *Metrics accepts every call and does nothing, so sync and tests can pass nil.
package metrics

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast-project/holdfast/internal/report"
)

// Label values. The methods accept any string, but every series is created
// (at zero) only for these, so dashboards see them before the first event.
const (
	ImportImported  = "imported"
	ImportUnchanged = "unchanged"
	ImportFailed    = "failed"

	PullPulled  = "pulled"
	PullPresent = "present"
	PullFailed  = "failed"

	CauseMissing = "missing" // every record of a wanted name was deleted
	CauseDrift   = "drift"   // a wanted name was re-pointed by someone else
	CauseLabel   = "label"   // a pin label was removed
	CauseContent = "content" // leased content was deleted; restored from the source

	KindArchive  = "archive"
	KindOCIDir   = "oci-dir"
	KindPullList = "pull-list"
	KindPinList  = "pin-list"

	StateApplied = "applied"
	StateFailed  = "failed"
	StatePending = "pending"
)

var (
	importResults = []string{ImportImported, ImportUnchanged, ImportFailed}
	pullResults   = []string{PullPulled, PullPresent, PullFailed}
	healCauses    = []string{CauseMissing, CauseDrift, CauseLabel, CauseContent}
	sourceKinds   = []string{KindArchive, KindOCIDir, KindPullList, KindPinList}
	sourceStates  = []string{StateApplied, StateFailed, StatePending}
)

// durationBuckets spans 10 ms to 10 min, the range of an import or a pass: a
// re-check of intact sources at the low end, a multi-GiB archive at the top.
var durationBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// SourceKey is one series of holdfast_sources: a source kind and its state.
type SourceKey struct {
	Kind  string // KindArchive, KindOCIDir, KindPullList or KindPinList
	State string // StateApplied, StateFailed or StatePending
}

// Metrics is the set of holdfast's collectors, registered into one registry.
type Metrics struct {
	imports        *prometheus.CounterVec
	importBytes    prometheus.Counter
	importDuration prometheus.Histogram
	pulls          *prometheus.CounterVec
	heals          *prometheus.CounterVec
	drift          prometheus.Counter
	unpins         prometheus.Counter
	releases       prometheus.Counter
	pinned         prometheus.Gauge

	sourcesMu   sync.Mutex
	sources     *prometheus.GaugeVec
	sourcesSeen map[SourceKey]bool // label sets outside the known kinds×states set by the last SetSources

	signatures *prometheus.GaugeVec
	required   *prometheus.GaugeVec

	reconcileDuration prometheus.Histogram
	lastSuccess       prometheus.Gauge
	reconciles        *prometheus.CounterVec
	connected         prometheus.Gauge
	backoff           prometheus.Gauge

	now func() time.Time
}

// New creates holdfast's collectors and registers them into reg (never the
// global default registry). It panics if reg already holds collectors of the
// same names, as registering twice is a programming error. A nil reg creates
// unregistered collectors.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		imports:           counterVec("holdfast_imports_total", "Sources imported, by result: imported (read into containerd), unchanged (lease complete and intact, not read) or failed.", "result"),
		importBytes:       counter("holdfast_import_bytes_read_total", "Bytes read from sources while importing them."),
		importDuration:    durations("holdfast_import_duration_seconds", "Time taken to import one source, whatever the result."),
		pulls:             counterVec("holdfast_pulls_total", "Images of pull lists, by result: pulled, present (already complete in the store) or failed.", "result"),
		heals:             counterVec("holdfast_heals_total", "Image records restored, by cause: missing, drift, label or content.", "cause"),
		drift:             counter("holdfast_drift_total", "Wanted names found re-pointed to another target by someone else."),
		unpins:            counter("holdfast_unpins_total", "Image records holdfast unpinned because no source wants them any more."),
		releases:          counter("holdfast_releases_total", "Source leases released because their source is gone or replaced."),
		pinned:            gauge("holdfast_pinned_images", "Image records currently pinned by holdfast."),
		sources:           gaugeVec("holdfast_sources", "Sources in the images directories, by kind and state, as of the last pass.", "kind", "state"),
		sourcesSeen:       map[SourceKey]bool{},
		required:          gaugeVec("holdfast_required_images", "Images the node's workloads need (the set its reporter sends), by where they stand on the node: pinned, present (not pinned), missing or mismatch (held at another digest only).", "state"),
		signatures:        gaugeVec("holdfast_signature_images", "Images the sources want, by signature verdict under the policy in force (unchecked, verified, unsigned, invalid; refused ones included), as of the last pass; none without a policy.", "state"),
		reconcileDuration: durations("holdfast_reconcile_duration_seconds", "Time taken by one reconcile pass, whatever the result."),
		lastSuccess:       gauge("holdfast_last_reconcile_success_timestamp_seconds", "Unix time at which the last successful reconcile pass ended; 0 before the first."),
		reconciles:        counterVec("holdfast_reconciles_total", "Reconcile passes, by result: ok or failed.", "result"),
		connected:         gauge("holdfast_containerd_connected", "1 while holdfast is connected to containerd, else 0."),
		backoff:           gauge("holdfast_heal_backoff_images", "Images whose healing is currently held back because they were healed too often."),
		now:               time.Now,
	}
	for _, v := range importResults {
		m.imports.WithLabelValues(v)
	}
	for _, v := range pullResults {
		m.pulls.WithLabelValues(v)
	}
	for _, v := range healCauses {
		m.heals.WithLabelValues(v)
	}
	for _, v := range []string{"ok", "failed"} {
		m.reconciles.WithLabelValues(v)
	}
	for _, k := range sourceKinds {
		for _, s := range sourceStates {
			m.sources.WithLabelValues(k, s)
		}
	}
	if reg != nil {
		reg.MustRegister(
			m.imports, m.importBytes, m.importDuration,
			m.pulls,
			m.heals, m.drift, m.unpins, m.releases,
			m.pinned, m.sources, m.signatures, m.required,
			m.reconcileDuration, m.lastSuccess, m.reconciles,
			m.connected, m.backoff,
		)
	}
	return m
}

// counter, gauge, durations, counterVec and gaugeVec make one collector of
// holdfast's; durations is a histogram of durationBuckets.
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

func durations(name, help string) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: durationBuckets})
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

// ImportDone records the import of one source: its result (ImportImported,
// ImportUnchanged or ImportFailed), the bytes read and the time taken.
func (m *Metrics) ImportDone(result string, bytes int64, d time.Duration) {
	if m == nil {
		return
	}
	m.imports.WithLabelValues(result).Inc()
	if bytes > 0 {
		m.importBytes.Add(float64(bytes))
	}
	m.importDuration.Observe(d.Seconds())
}

// PullDone records one image of a pull list: PullPulled, PullPresent or PullFailed.
func (m *Metrics) PullDone(result string) {
	if m == nil {
		return
	}
	m.pulls.WithLabelValues(result).Inc()
}

// Healed records one record restored, for cause CauseMissing, CauseDrift,
// CauseLabel or CauseContent.
func (m *Metrics) Healed(cause string) {
	if m == nil {
		return
	}
	m.heals.WithLabelValues(cause).Inc()
}

// Drift records one wanted name found re-pointed by someone else.
func (m *Metrics) Drift() {
	if m == nil {
		return
	}
	m.drift.Inc()
}

// Unpinned records n records unpinned. n <= 0 is ignored.
func (m *Metrics) Unpinned(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.unpins.Add(float64(n))
}

// Released records n source leases released. n <= 0 is ignored.
func (m *Metrics) Released(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.releases.Add(float64(n))
}

// SetPinned sets the number of records currently pinned by holdfast.
func (m *Metrics) SetPinned(n int) {
	if m == nil {
		return
	}
	m.pinned.Set(float64(n))
}

// SetSignatures sets holdfast_signature_images: every state is exported,
// at 0 when counts lacks it.
func (m *Metrics) SetSignatures(counts map[string]int) {
	if m == nil {
		return
	}
	for _, s := range signatureStates {
		m.signatures.WithLabelValues(s).Set(float64(counts[s]))
	}
}

// SetRequired sets holdfast_required_images: every state is exported, at 0
// when counts lacks it.
func (m *Metrics) SetRequired(counts map[report.State]int) {
	if m == nil {
		return
	}
	for _, s := range requiredStates {
		m.required.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
}

// requiredStates are the states of an image on the node.
var requiredStates = []report.State{report.Pinned, report.Present, report.Missing, report.Mismatch}

// signatureStates are the states of policy.Verdict.
var signatureStates = []string{"unchecked", "verified", "unsigned", "invalid"}

// SetSources replaces the whole holdfast_sources vector with counts. Every
// known kind×state series is always exported, at 0 when counts lacks it; any
// other label set from an earlier call that counts no longer holds is deleted.
func (m *Metrics) SetSources(counts map[SourceKey]int) {
	if m == nil {
		return
	}
	m.sourcesMu.Lock()
	defer m.sourcesMu.Unlock()
	for _, k := range sourceKinds {
		for _, s := range sourceStates {
			m.sources.WithLabelValues(k, s).Set(float64(counts[SourceKey{Kind: k, State: s}]))
		}
	}
	seen := map[SourceKey]bool{}
	for key, n := range counts {
		if known(key) {
			continue
		}
		m.sources.WithLabelValues(key.Kind, key.State).Set(float64(n))
		seen[key] = true
	}
	for key := range m.sourcesSeen {
		if !seen[key] {
			m.sources.DeleteLabelValues(key.Kind, key.State)
		}
	}
	m.sourcesSeen = seen
}

func known(key SourceKey) bool {
	return slices.Contains(sourceKinds, key.Kind) && slices.Contains(sourceStates, key.State)
}

// ReconcileDone records one reconcile pass that took d; when ok, it also sets
// the last-success timestamp to now.
func (m *Metrics) ReconcileDone(d time.Duration, ok bool) {
	if m == nil {
		return
	}
	m.reconcileDuration.Observe(d.Seconds())
	if !ok {
		m.reconciles.WithLabelValues("failed").Inc()
		return
	}
	m.reconciles.WithLabelValues("ok").Inc()
	m.lastSuccess.Set(float64(m.now().UnixNano()) / 1e9)
}

// SetConnected records whether holdfast is connected to containerd.
func (m *Metrics) SetConnected(connected bool) {
	if m == nil {
		return
	}
	if connected {
		m.connected.Set(1)
	} else {
		m.connected.Set(0)
	}
}

// SetBackoff sets the number of images currently in heal backoff.
func (m *Metrics) SetBackoff(n int) {
	if m == nil {
		return
	}
	m.backoff.Set(float64(n))
}

package metrics

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape renders reg in the text exposition format, as a scraper would get
// it, and parses it back with the Prometheus text parser.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatalf("encode %s: %v", mf.GetName(), err)
		}
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(&buf)
	if err != nil {
		t.Fatalf("parse exposition: %v\n%s", err, buf.String())
	}
	return fams
}

// find returns the metric of family name whose labels are exactly labels.
func find(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	mf, ok := fams[name]
	if !ok {
		t.Fatalf("family %s not exposed", name)
	}
next:
	for _, m := range mf.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		for _, lp := range m.GetLabel() {
			if v, ok := labels[lp.GetName()]; !ok || v != lp.GetValue() {
				continue next
			}
		}
		return m
	}
	t.Fatalf("%s%v not exposed", name, labels)
	return nil
}

func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	m := find(t, fams, name, labels)
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	t.Fatalf("%s%v is neither a counter nor a gauge", name, labels)
	return 0
}

func histogram(t *testing.T, fams map[string]*dto.MetricFamily, name string) (count uint64, sum float64) {
	t.Helper()
	h := find(t, fams, name, nil).GetHistogram()
	if h == nil {
		t.Fatalf("%s is not a histogram", name)
	}
	return h.GetSampleCount(), h.GetSampleSum()
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

var allFamilies = []string{
	"holdfast_imports_total",
	"holdfast_import_bytes_read_total",
	"holdfast_import_duration_seconds",
	"holdfast_pulls_total",
	"holdfast_heals_total",
	"holdfast_drift_total",
	"holdfast_unpins_total",
	"holdfast_releases_total",
	"holdfast_pinned_images",
	"holdfast_sources",
	"holdfast_reconcile_duration_seconds",
	"holdfast_last_reconcile_success_timestamp_seconds",
	"holdfast_reconciles_total",
	"holdfast_containerd_connected",
	"holdfast_heal_backoff_images",
}

func TestEveryMethod(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := New(reg)
	at := time.Date(2026, 3, 4, 5, 6, 7, 500_000_000, time.UTC)
	m.now = func() time.Time { return at }

	m.ImportDone(ImportImported, 1000, 2*time.Second)
	m.ImportDone(ImportImported, 24, 500*time.Millisecond)
	m.ImportDone(ImportUnchanged, 0, 10*time.Millisecond)
	m.ImportDone(ImportFailed, -5, 0) // negative bytes are not counted
	m.PullDone(PullPulled)
	m.PullDone(PullPresent)
	m.PullDone(PullPresent)
	m.PullDone(PullFailed)
	m.Healed(CauseMissing)
	m.Healed(CauseDrift)
	m.Healed(CauseDrift)
	m.Healed(CauseLabel)
	m.Healed(CauseContent)
	m.Drift()
	m.Drift()
	m.Unpinned(3)
	m.Unpinned(0)
	m.Unpinned(-2)
	m.Released(2)
	m.Released(-1)
	m.SetPinned(9)
	m.SetSources(map[SourceKey]int{
		{KindArchive, StateApplied}: 4,
		{KindArchive, StateFailed}:  1,
		{KindOCIDir, StateApplied}:  2,
		{KindPinList, StatePending}: 1,
	})
	m.ReconcileDone(3*time.Second, true)
	m.ReconcileDone(time.Second, false)
	m.SetConnected(true)
	m.SetBackoff(2)

	fams := scrape(t, reg)
	for name := range fams {
		if !strings.HasPrefix(name, "holdfast_") {
			t.Errorf("family %s does not start with holdfast_", name)
		}
	}
	for _, name := range allFamilies {
		if _, ok := fams[name]; !ok {
			t.Errorf("family %s not exposed", name)
		}
	}
	if len(fams) != len(allFamilies) {
		t.Errorf("%d families exposed, want %d", len(fams), len(allFamilies))
	}

	type sample struct {
		name   string
		labels map[string]string
		want   float64
	}
	for _, s := range []sample{
		{"holdfast_imports_total", map[string]string{"result": "imported"}, 2},
		{"holdfast_imports_total", map[string]string{"result": "unchanged"}, 1},
		{"holdfast_imports_total", map[string]string{"result": "failed"}, 1},
		{"holdfast_import_bytes_read_total", nil, 1024},
		{"holdfast_pulls_total", map[string]string{"result": "pulled"}, 1},
		{"holdfast_pulls_total", map[string]string{"result": "present"}, 2},
		{"holdfast_pulls_total", map[string]string{"result": "failed"}, 1},
		{"holdfast_heals_total", map[string]string{"cause": "missing"}, 1},
		{"holdfast_heals_total", map[string]string{"cause": "drift"}, 2},
		{"holdfast_heals_total", map[string]string{"cause": "label"}, 1},
		{"holdfast_heals_total", map[string]string{"cause": "content"}, 1},
		{"holdfast_drift_total", nil, 2},
		{"holdfast_unpins_total", nil, 3},
		{"holdfast_releases_total", nil, 2},
		{"holdfast_pinned_images", nil, 9},
		{"holdfast_sources", map[string]string{"kind": "archive", "state": "applied"}, 4},
		{"holdfast_sources", map[string]string{"kind": "archive", "state": "failed"}, 1},
		{"holdfast_sources", map[string]string{"kind": "archive", "state": "pending"}, 0},
		{"holdfast_sources", map[string]string{"kind": "oci-dir", "state": "applied"}, 2},
		{"holdfast_sources", map[string]string{"kind": "pin-list", "state": "pending"}, 1},
		{"holdfast_sources", map[string]string{"kind": "pull-list", "state": "applied"}, 0},
		{"holdfast_last_reconcile_success_timestamp_seconds", nil, float64(at.Unix()) + 0.5},
		{"holdfast_reconciles_total", map[string]string{"result": "ok"}, 1},
		{"holdfast_reconciles_total", map[string]string{"result": "failed"}, 1},
		{"holdfast_containerd_connected", nil, 1},
		{"holdfast_heal_backoff_images", nil, 2},
	} {
		if got := value(t, fams, s.name, s.labels); !near(got, s.want) {
			t.Errorf("%s%v = %v, want %v", s.name, s.labels, got, s.want)
		}
	}
	if n, sum := histogram(t, fams, "holdfast_import_duration_seconds"); n != 4 || !near(sum, 2.51) {
		t.Errorf("import duration: count %d sum %v, want 4 and 2.51", n, sum)
	}
	if n, sum := histogram(t, fams, "holdfast_reconcile_duration_seconds"); n != 2 || !near(sum, 4) {
		t.Errorf("reconcile duration: count %d sum %v, want 2 and 4", n, sum)
	}

	// The buckets cover 10 ms to 10 min.
	h := find(t, fams, "holdfast_import_duration_seconds", nil).GetHistogram()
	b := h.GetBucket()
	if n := len(b); n > 0 && math.IsInf(b[n-1].GetUpperBound(), 1) {
		b = b[:n-1] // the text format spells out the +Inf bucket
	}
	if first, last := b[0].GetUpperBound(), b[len(b)-1].GetUpperBound(); first != 0.01 || last != 600 {
		t.Errorf("import buckets span %v..%v, want 0.01..600", first, last)
	}

	m.SetConnected(false)
	if got := testutil.ToFloat64(m.connected); got != 0 {
		t.Errorf("connected after SetConnected(false) = %v, want 0", got)
	}
	// A failed pass leaves the last success alone.
	m.now = func() time.Time { return at.Add(time.Hour) }
	m.ReconcileDone(time.Second, false)
	if got := testutil.ToFloat64(m.lastSuccess); !near(got, float64(at.Unix())+0.5) {
		t.Errorf("last success moved on a failed pass: %v", got)
	}
}

func TestSeriesExistAtZero(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	New(reg)
	fams := scrape(t, reg)
	for name, want := range map[string]int{
		"holdfast_imports_total":    3,
		"holdfast_pulls_total":      3,
		"holdfast_heals_total":      4,
		"holdfast_reconciles_total": 2,
		"holdfast_sources":          12,
	} {
		if got := len(fams[name].GetMetric()); got != want {
			t.Errorf("%s has %d series before any event, want %d", name, got, want)
		}
	}
	if got := value(t, fams, "holdfast_last_reconcile_success_timestamp_seconds", nil); got != 0 {
		t.Errorf("last success before any pass = %v, want 0", got)
	}
}

func TestSetSourcesReplacesStale(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.SetSources(map[SourceKey]int{
		{KindArchive, StateApplied}:   3,
		{"future-kind", StateApplied}: 1,
	})
	fams := scrape(t, reg)
	if got := len(fams["holdfast_sources"].GetMetric()); got != 13 {
		t.Fatalf("holdfast_sources has %d series, want 13", got)
	}
	if got := value(t, fams, "holdfast_sources", map[string]string{"kind": "future-kind", "state": "applied"}); got != 1 {
		t.Errorf("future-kind applied = %v, want 1", got)
	}

	m.SetSources(map[SourceKey]int{{KindOCIDir, StateFailed}: 2})
	fams = scrape(t, reg)
	if got := len(fams["holdfast_sources"].GetMetric()); got != 12 {
		t.Errorf("holdfast_sources has %d series after the unknown kind went, want 12", got)
	}
	for _, s := range []struct {
		kind, state string
		want        float64
	}{
		{"archive", "applied", 0},
		{"oci-dir", "failed", 2},
	} {
		if got := value(t, fams, "holdfast_sources", map[string]string{"kind": s.kind, "state": s.state}); got != s.want {
			t.Errorf("sources{%s,%s} = %v, want %v", s.kind, s.state, got, s.want)
		}
	}

	m.SetSources(nil)
	fams = scrape(t, reg)
	for _, mt := range fams["holdfast_sources"].GetMetric() {
		if mt.GetGauge().GetValue() != 0 {
			t.Errorf("after SetSources(nil): %v", mt)
		}
	}
}

func TestLint(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	New(reg)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

func TestNilIsSafe(t *testing.T) {
	t.Parallel()
	var m *Metrics
	m.ImportDone(ImportImported, 1, time.Second)
	m.PullDone(PullPulled)
	m.Healed(CauseMissing)
	m.Drift()
	m.Unpinned(1)
	m.Released(1)
	m.SetPinned(1)
	m.SetSources(map[SourceKey]int{{KindArchive, StateApplied}: 1})
	m.ReconcileDone(time.Second, true)
	m.SetConnected(true)
	m.SetBackoff(1)
}

func TestNilRegisterer(t *testing.T) {
	t.Parallel()
	m := New(nil)
	m.Drift()
	if got := testutil.ToFloat64(m.drift); got != 1 {
		t.Errorf("drift = %v, want 1", got)
	}
}

func TestRegisteringTwicePanics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	New(reg)
	defer func() {
		if recover() == nil {
			t.Error("a second New on the same registry did not panic")
		}
	}()
	New(reg)
}

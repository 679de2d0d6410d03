package bench

import (
	"math"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/imageset"
)

// TestP11Waves: the waves the model counts, as the ImageSet's waves take them (a holder resting after three).
func TestP11Waves(t *testing.T) {
	for _, c := range []struct{ n, m, want int }{
		{1, 64, 0}, {2, 64, 1}, {3, 64, 2}, {4, 64, 2}, {5, 64, 3}, {8, 64, 3},
		// 1, 2, 4, 8, 15 nodes after 0–4 waves: the 16th in the 5th.
		{15, 64, 4}, {16, 64, 5},
		{1000, 500, 11}, {1000, 0, 22},
		// 1, 2, 4, 8, 15, 28, 52 (+24), then 64 a wave: 6 + ⌈948/64⌉.
		{1000, 64, 22},
		// 1, 2, 4, then 3 a wave: 2 + ⌈6/3⌉.
		{10, 3, 4},
	} {
		if got := imageset.Waves(c.n, c.m); got != c.want {
			t.Errorf("Waves(%d, %d) = %d, want %d", c.n, c.m, got, c.want)
		}
	}
}

func TestP11Bound(t *testing.T) {
	// 200 MiB at 200 Mbit/s: 8.39 s a wave; 8 nodes, 3 waves.
	got := p11Bound(8, 200*mib, 200)
	if want := 3 * 200 * float64(mib) * 8 / 200e6; math.Abs(got-want) > 1e-9 {
		t.Errorf("p11Bound(8, 200 MiB, 200) = %v, want %v", got, want)
	}
	if got := p11Bound(2, 200*mib, 200); math.Abs(got-8.388608) > 1e-6 {
		t.Errorf("p11Bound(2, 200 MiB, 200) = %v, want 8.388608", got)
	}
}

func p11TestSamples() []Sample {
	size := 25 * int64(1e6) // 1 s at 200 Mbit/s
	return []Sample{
		{Scenario: ScenarioP11Link, Method: MethodP11Link, Round: 1, Seconds: 1.05, Bytes: size},
		{Scenario: p11Scenario(4), Method: MethodP11Waves, Round: 1, Seconds: 2.5, Bytes: size, Served: []int64{size, size, 0, 0}},
		{Scenario: p11Scenario(4), Method: MethodP11AllAtOnce, Round: 1, Seconds: 3.3, Bytes: size, Served: []int64{3 * size, 0, 0, 0}},
		{Scenario: p11Scenario(4), Method: MethodP11Waves, Round: 2, Seconds: 4.5, Bytes: size, Served: []int64{2 * size, size, 0, 0}},
		{Scenario: p11Scenario(4), Method: MethodP11AllAtOnce, Round: 2, Error: "not pinned", Bytes: size},
		{Scenario: p11Scenario(2), Method: MethodP11Waves, Round: 1, Seconds: 1.2, Bytes: size, Served: []int64{size, 0}},
	}
}

func TestP11Rows(t *testing.T) {
	rows := p11Rows(p11TestSamples(), 200)
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3: %+v", len(rows), rows)
	}
	if rows[0].N != 2 || rows[1].N != 4 || rows[1].Method != MethodP11Waves || rows[2].Method != MethodP11AllAtOnce {
		t.Fatalf("rows not by N, then in order of appearance: %+v", rows)
	}
	w := rows[1]
	if w.Samples != 2 || w.Median != 3.5 || w.Bound != 2 || w.Served != 1.5 || w.ServedByNode1 != 1.5 {
		t.Errorf("N=4 waves: %+v, want 2 samples, median 3.5 s, bound 2 s, served 1.5×, node 1 1.5×", w)
	}
	a := rows[2]
	if a.Samples != 1 || a.Failed != 1 || a.Served != 3 || a.Bound != 2 {
		t.Errorf("N=4 all at once: %+v, want 1 sample, 1 failed, served 3×, bound 2 s", a)
	}
}

func TestP11Model(t *testing.T) {
	rows := p11Rows(p11TestSamples(), 200)
	m, ok := p11ModelOf(rows, 25e6, 200)
	if !ok {
		t.Fatal("no model")
	}
	// N=4's median 3.5 s over 2 waves: 1.75 s a wave.
	if m.FromN != 4 || m.PerWave != 1.75 || m.BoundWave != 1 || m.Waves64 != 22 || m.WavesHalf != 11 {
		t.Fatalf("model %+v", m)
	}
	if m.Measured64 != 38.5 || m.MeasuredHalf != 19.25 || m.Bound64 != 22 || m.BoundHalf != 11 {
		t.Errorf("model %+v, want 38.5 s, 19.25 s, 22 s, 11 s", m)
	}
	if _, ok := p11ModelOf(rows[2:], 25e6, 200); ok {
		t.Error("a model without any ImageSet row")
	}
}

func TestWriteP11(t *testing.T) {
	r := &Results{Samples: p11TestSamples(), Config: ConfigJSON{P11: P11Config{RateMbit: 200}}}
	var b strings.Builder
	writeP11(&b, r)
	out := strings.Join(strings.Fields(b.String()), " ") // the table's padding aside
	for _, want := range []string{
		"Link check: 23.8 MiB from node 1 to node 2 at 190 Mbit/s",
		"| 4 | " + MethodP11Waves + " | 3.50 s | 2 | 2.00 s | 1.75× | 1.50× | 1.50× | missed: time > 1.5 × bound |",
		"| 2 | " + MethodP11Waves + " | 1.20 s | 1 | 1.00 s | 1.20× | 1.00× | 1.00× | met |",
		"| 4 | " + MethodP11AllAtOnce + " | 3.30 s | 1 (+1 failed) | 2.00 s | 1.65× | 3.00× | 3.00× | |",
		"maxConcurrent 64, 22 waves: 38.5 s (bound 22.0 s)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	writeP11(&b, &Results{Config: ConfigJSON{P11: P11Config{RateMbit: 200}}})
	if b.Len() != 0 {
		t.Errorf("a report without P11 samples: %q", b.String())
	}
}

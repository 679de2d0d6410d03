package bench

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{5, 5, 1, 9, 5}, 5},
	} {
		in := append([]float64(nil), c.in...)
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
		for i := range in {
			if in[i] != c.in[i] {
				t.Fatalf("Median reordered its input: %v", c.in)
			}
		}
	}
	if !math.IsNaN(Median(nil)) {
		t.Errorf("Median(nil) is not NaN")
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	fifty := make([]float64, 50)
	for i := range fifty {
		fifty[i] = float64(50 - i) // 50 … 1, unsorted
	}
	for _, c := range []struct {
		in   []float64
		p    float64
		want float64
	}{
		{fifty, 50, 25},  // rank 25
		{fifty, 99, 50},  // rank ceil(49.5) = 50: the largest of 50
		{fifty, 100, 50}, // the largest
		{fifty, 0.01, 1}, // the smallest
		{fifty, 90, 45},  // rank 45
		{[]float64{7}, 99, 7},
		{[]float64{1, 2, 3, 4}, 50, 2},
		{[]float64{1, 2, 3, 4}, 75, 3},
		{[]float64{1, 2, 3, 4}, 76, 4},
	} {
		if got := Percentile(c.in, c.p); got != c.want {
			t.Errorf("Percentile(%d values, %v) = %v, want %v", len(c.in), c.p, got, c.want)
		}
	}
	for _, p := range []float64{0, -1, 101} {
		if !math.IsNaN(Percentile(fifty, p)) {
			t.Errorf("Percentile(p=%v) is not NaN", p)
		}
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Errorf("Percentile(nil) is not NaN")
	}
}

func TestRatio(t *testing.T) {
	t.Parallel()
	if got := Ratio(1, 4); got != 0.25 {
		t.Errorf("Ratio(1, 4) = %v", got)
	}
	for _, c := range [][2]float64{{1, 0}, {math.NaN(), 1}, {1, math.NaN()}} {
		if !math.IsNaN(Ratio(c[0], c[1])) {
			t.Errorf("Ratio(%v, %v) is not NaN", c[0], c[1])
		}
	}
}

func TestComputeStats(t *testing.T) {
	t.Parallel()
	samples := []Sample{
		{Scenario: "P1", Method: "a", Round: 1, Seconds: 3, ClientCPUSeconds: 1, MaxRSSBytes: 10},
		{Scenario: "P1", Method: "b", Round: 1, Seconds: 9},
		{Scenario: "P1", Method: "a", Round: 2, Seconds: 1, ClientCPUSeconds: 3, MaxRSSBytes: 30},
		{Scenario: "P1", Method: "b", Round: 2, Error: "boom"},
		{Scenario: "P1", Method: "a", Round: 3, Seconds: 2, ClientCPUSeconds: 2, MaxRSSBytes: 20},
	}
	stats := computeStats(samples)
	if len(stats) != 2 || stats[0].Method != "a" || stats[1].Method != "b" {
		t.Fatalf("stats in the wrong order or number: %+v", stats)
	}
	a := stats[0]
	if a.N != 3 || a.Median != 2 || a.Min != 1 || a.Max != 3 || a.ClientCPU != 2 || a.MaxRSSBytes != 30 {
		t.Errorf("stat a = %+v", a)
	}
	if b := stats[1]; b.N != 1 || b.Failed != 1 || b.Median != 9 {
		t.Errorf("stat b = %+v", b)
	}
	// All samples failed: NaN medians must still encode.
	none := computeStats([]Sample{{Scenario: "P2", Method: "x", Error: "no"}})
	js, err := json.Marshal(none)
	if err != nil {
		t.Fatalf("encoding a stat without data: %v", err)
	}
	if !strings.Contains(string(js), `"median_seconds":null`) {
		t.Errorf("a stat without data encodes as %s", js)
	}
}

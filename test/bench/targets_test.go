package bench

import (
	"math"
	"testing"
)

func TestTargetEvaluate(t *testing.T) {
	t.Parallel()
	atMost := Target{ID: "x", Op: AtMost, Limit: 0.25, Unit: "×"}
	atLeast := Target{ID: "y", Op: AtLeast, Limit: 100, Unit: "×"}
	for _, c := range []struct {
		t       Target
		v       float64
		met     bool
		off     float64
		verdict string
	}{
		{atMost, 0.2, true, 0, "met"},
		{atMost, 0.25, true, 0, "met"},
		{atMost, 0.31, false, 1.24, "missed: 1.24× over"},
		{atLeast, 150, true, 0, "met"},
		{atLeast, 100, true, 0, "met"},
		{atLeast, 40, false, 2.5, "missed: 2.50× short"},
		{atLeast, 0, false, math.Inf(1), "missed: ∞× short"},
	} {
		o := c.t.Evaluate(c.v)
		if o.Met != c.met || math.Abs(float64(o.Off)-c.off) > 1e-9 && !math.IsInf(c.off, 1) || o.Verdict() != c.verdict {
			t.Errorf("%s %v against %v: met %t off %v %q; want met %t off %v %q",
				c.t.Op, c.v, c.t.Limit, o.Met, o.Off, o.Verdict(), c.met, c.off, c.verdict)
		}
	}
	o := atMost.Evaluate(math.NaN())
	if o.Met || !o.Missing || o.Verdict() != "no data" || o.ValueString() != "–" {
		t.Errorf("NaN: %+v %q", o, o.Verdict())
	}
	if s := atMost.LimitString(); s != "≤ 0.250×" && s != "≤ 0.25×" {
		t.Errorf("LimitString = %q", s)
	}
	if s := (Target{Op: AtMost, Limit: 500, Unit: "ms"}).LimitString(); s != "≤ 500 ms" {
		t.Errorf("LimitString = %q", s)
	}
}

func TestEvaluateTargets(t *testing.T) {
	t.Parallel()
	stat := func(scenario, method string, median, p99 float64, rss int64) Stat {
		return Stat{Scenario: scenario, Method: method, N: 3, Median: Float(median), P50: Float(median), P99: Float(p99), MaxRSSBytes: rss}
	}
	p1 := stat(ScenarioP1, MethodHoldfastDirect, 2, 2, 40<<20)
	p1.ClientCPU, p1.ContainerdCPU, p1.Bytes = 1.5, 0.5, 1<<29 // half a GiB: 4 CPU-s and 1 s per GiB
	stats := []Stat{
		p1,
		stat(ScenarioP1, MethodHoldfastStream, 3, 3, 40<<20), // never a target's holdfast side
		stat(ScenarioP1, MethodCtr, 20, 20, 0),
		stat(ScenarioP1, MethodCtrLocal, 4, 4, 0),
		stat(ScenarioP1, MethodFloor, 2.5, 2.5, 0),
		stat(ScenarioP1, MethodHoldfastZstDirect, 2.4, 2.4, 0),
		stat(ScenarioP1, MethodHoldfastZstStream, 9, 9, 0),
		stat(ScenarioP1, MethodZstdFloor, 1.6, 1.6, 0),
		stat(ScenarioP1Small, MethodHoldfastDirect, 1, 1, 0),
		stat(ScenarioP1Small, MethodHoldfastStream, 0.1, 0.1, 0),
		stat(ScenarioP1Small, MethodCtr, 2, 2, 0),
		stat(ScenarioP2, MethodHoldfastDirect, 1, 1, 0),
		stat(ScenarioP2, MethodCtr, 10, 10, 0),
		stat(ScenarioP3, MethodHoldfastWarm, 0.05, 0.05, 0),
		stat(ScenarioP3, MethodCtrLocal, 4, 4, 0),
		stat(ScenarioHeal, MethodAgent, 0.1, 0.6, 0),
		stat(ScenarioP5, MethodHoldfastDirect, 30, 30, 80<<20),
		stat(ScenarioP5, MethodHoldfastStream, 40, 40, 120<<20),
	}
	want := map[string]struct {
		value float64
		met   bool
	}{
		"P1 CPU per GiB":            {4, false},
		"P1 containerd CPU per GiB": {1, false},
		"P1 vs ctr":                 {0.1, true},
		"P1 vs ctr --local":         {0.5, true},
		"P1 vs floor":               {0.8, true},
		"P1s vs ctr":                {0.5, false},
		"P2 vs ctr":                 {0.1, true},
		"P3 warm sync":              {50, true},
		"P3 vs ctr":                 {80, false},
		"P4 heal p99":               {600, false},
		"P5 RSS (direct)":           {80, true},
		"P5 RSS (stream)":           {120, false},
		"P6 zst vs tar":             {1.2, true},
		"P6 zst vs decode floor":    {1.5, false},
	}
	got := evaluateTargets(stats)
	if len(got) != len(want) {
		t.Fatalf("got %d targets, want %d: %+v", len(got), len(want), got)
	}
	for _, o := range got {
		w, ok := want[o.ID]
		if !ok {
			t.Errorf("unexpected target %q (scenario not measured)", o.ID)
			continue
		}
		if math.Abs(float64(o.Value)-w.value) > 1e-9 || o.Met != w.met {
			t.Errorf("%s: value %v met %t, want %v %t", o.ID, o.Value, o.Met, w.value, w.met)
		}
	}
}

// A direct row without a byte count, or whose samples all failed, gives "no
// data" for the CPU targets, never a number.
func TestCPUPerGiBMissing(t *testing.T) {
	t.Parallel()
	for name, s := range map[string]Stat{
		"no bytes":   {Scenario: ScenarioP1, Method: MethodHoldfastDirect, N: 3, Median: 2, ClientCPU: 1, ContainerdCPU: 1},
		"all failed": {Scenario: ScenarioP1, Method: MethodHoldfastDirect, N: 0, Failed: 3, Median: Float(math.NaN()), Bytes: 1 << 30},
	} {
		got := evaluateTargets([]Stat{s})
		if len(got) != 2 {
			t.Fatalf("%s: %d targets, want the 2 CPU ones: %+v", name, len(got), got)
		}
		for _, o := range got {
			if !o.Missing || o.Met {
				t.Errorf("%s: %s = %+v, want no data", name, o.ID, o)
			}
		}
	}
}

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
	stats := []Stat{
		stat(ScenarioP1, MethodHoldfast, 2, 2, 80<<20),
		stat(ScenarioP1, MethodCtr, 10, 10, 0),
		stat(ScenarioP1, MethodCtrLocal, 4, 4, 0),
		stat(ScenarioP1, MethodFloor, 1, 1, 0),
		stat(ScenarioP1, MethodHoldfastZst, 3, 3, 120<<20),
		stat(ScenarioP3, MethodHoldfastWarm, 0.05, 0.05, 0),
		stat(ScenarioP3, MethodCtrLocal, 4, 4, 0),
		stat(ScenarioHeal, MethodAgent, 0.1, 0.6, 0),
	}
	want := map[string]struct {
		value float64
		met   bool
	}{
		"P1 vs ctr":         {0.2, true},
		"P1 vs ctr --local": {0.5, true},
		"P1 vs floor":       {2, false},
		"P3 warm sync":      {50, true},
		"P3 vs ctr":         {80, false},
		"P4 heal p99":       {600, false},
		"P5 RSS .tar":       {80, true},
		"P5 RSS .tar.zst":   {120, false},
		"P6 zst vs tar":     {1.5, false},
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

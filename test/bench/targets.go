package bench

import (
	"fmt"
	"math"
	"strconv"
)

// Op is how a measured value is compared with its target's limit.
type Op string

const (
	AtMost  Op = "<=" // met when the value is at most the limit
	AtLeast Op = ">=" // met when the value is at least the limit
)

// Target is one of the import targets (docs/benchmarks.md).
type Target struct {
	ID    string  `json:"id"`   // "P1 vs ctr"
	What  string  `json:"what"` // what the value is
	Op    Op      `json:"op"`
	Limit float64 `json:"limit"`
	Unit  string  `json:"unit"` // "×", "ms", "MiB"
}

// Outcome is a target evaluated against a measured value.
type Outcome struct {
	Target
	Value Float `json:"value"`
	// Met is false when the value is missing (NaN).
	Met bool `json:"met"`
	// Off is how far the value is from the limit, as a factor ≥ 1 in the
	// bad direction (1.24: 24% over an at-most limit, or an at-least limit
	// is 1.24× the value); 0 when met or missing.
	Off     Float `json:"off,omitempty"`
	Missing bool  `json:"missing,omitempty"`
}

// Evaluate compares v with the target.
func (t Target) Evaluate(v float64) Outcome {
	o := Outcome{Target: t, Value: Float(v)}
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		o.Missing = true
	case t.Op == AtMost:
		o.Met = v <= t.Limit
		if !o.Met {
			o.Off = Float(v / t.Limit)
		}
	case t.Op == AtLeast:
		o.Met = v >= t.Limit
		if !o.Met {
			if v > 0 {
				o.Off = Float(t.Limit / v)
			} else {
				o.Off = Float(math.Inf(1))
			}
		}
	}
	return o
}

// Verdict is "met", "no data", or "missed: 1.24× over" / "missed: 2.5× short".
func (o Outcome) Verdict() string {
	switch {
	case o.Missing:
		return "no data"
	case o.Met:
		return "met"
	case o.Op == AtLeast:
		return fmt.Sprintf("missed: %s× short", fmtFactor(float64(o.Off)))
	}
	return fmt.Sprintf("missed: %s× over", fmtFactor(float64(o.Off)))
}

// LimitString is the target as the docs write it: "≤ 0.25×", "≥ 100×", "≤ 500 ms".
func (t Target) LimitString() string {
	op := "≤"
	if t.Op == AtLeast {
		op = "≥"
	}
	return fmt.Sprintf("%s %s%s", op, fmtNum(t.Limit), unitSuffix(t.Unit))
}

// ValueString is the value with the target's unit.
func (o Outcome) ValueString() string {
	if o.Missing {
		return "–"
	}
	return fmtNum(float64(o.Value)) + unitSuffix(o.Unit)
}

func unitSuffix(unit string) string {
	if unit == "×" || unit == "" {
		return unit
	}
	return " " + unit
}

// fmtNum prints three significant digits, without exponent for usual sizes.
func fmtNum(v float64) string {
	if r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64); err == nil {
		v = r // 99.99 prints as 100, not 100.0
	}
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "–"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	case a == 0:
		return "0"
	}
	return fmt.Sprintf("%.3g", v)
}

func fmtFactor(f float64) string {
	if math.IsInf(f, 1) {
		return "∞"
	}
	return fmtNum(f)
}

// gib is 2^30 bytes.
const gib = float64(1 << 30)

// cpuPerGiB is the CPU time per GiB imported of a stat: with containerd,
// the median client CPU plus the median containerd CPU; without, the median
// containerd CPU alone. NaN when the stat has no successful sample or no byte
// count.
func cpuPerGiB(s *Stat, withClient bool) float64 {
	if s == nil || s.N == 0 || s.Bytes <= 0 {
		return math.NaN()
	}
	cpu := float64(s.ContainerdCPU)
	if withClient {
		cpu += float64(s.ClientCPU)
	}
	return cpu / (float64(s.Bytes) / gib)
}

// evaluateTargets evaluates the targets on the stats; a target whose
// scenario did not run is left out, one whose samples all failed is "no
// data". Ratios are of medians; holdfast's side is always the direct write
// path (the default to be).
func evaluateTargets(stats []Stat) []Outcome {
	var out []Outcome
	median := func(scenario, method string) (float64, bool) {
		s := findStat(stats, scenario, method)
		if s == nil {
			return 0, false
		}
		return float64(s.Median), true
	}
	ratio := func(t Target, scenario, a, b string) {
		x, okA := median(scenario, a)
		y, okB := median(scenario, b)
		if okA && okB {
			out = append(out, t.Evaluate(Ratio(x, y)))
		}
	}
	if s := findStat(stats, ScenarioP1, MethodHoldfastDirect); s != nil {
		out = append(out,
			Target{ID: "P1 CPU per GiB", What: "holdfast + containerd CPU per GiB imported (direct; medians)", Op: AtMost, Limit: 2, Unit: "CPU-s"}.Evaluate(cpuPerGiB(s, true)),
			Target{ID: "P1 containerd CPU per GiB", What: "containerd's CPU per GiB imported (direct; median)", Op: AtMost, Limit: 0.3, Unit: "s"}.Evaluate(cpuPerGiB(s, false)))
	}
	ratio(Target{ID: "P1 vs ctr", What: "holdfast sync (direct) ÷ ctr import (cold)", Op: AtMost, Limit: 0.12, Unit: "×"},
		ScenarioP1, MethodHoldfastDirect, MethodCtr)
	ratio(Target{ID: "P1 vs ctr --local", What: "holdfast sync (direct) ÷ ctr import --local (cold)", Op: AtMost, Limit: 0.5, Unit: "×"},
		ScenarioP1, MethodHoldfastDirect, MethodCtrLocal)
	ratio(Target{ID: "P1 vs floor", What: "holdfast sync (direct) ÷ floor (read + sha256 + write + fsync)", Op: AtMost, Limit: 0.9, Unit: "×"},
		ScenarioP1, MethodHoldfastDirect, MethodFloor)
	ratio(Target{ID: "P1s vs ctr", What: "holdfast sync (direct) ÷ ctr import (cold, 300 small layers)", Op: AtMost, Limit: 0.4, Unit: "×"},
		ScenarioP1Small, MethodHoldfastDirect, MethodCtr)
	ratio(Target{ID: "P2 vs ctr", What: "holdfast sync (direct) of 4 archives ÷ ctr import of each in turn", Op: AtMost, Limit: 0.12, Unit: "×"},
		ScenarioP2, MethodHoldfastDirect, MethodCtr)
	if warm, ok := median(ScenarioP3, MethodHoldfastWarm); ok {
		out = append(out, Target{ID: "P3 warm sync", What: "holdfast sync, every archive unchanged, whole process", Op: AtMost, Limit: 100, Unit: "ms"}.Evaluate(warm*1000))
		if ctr, ok := median(ScenarioP3, MethodCtrLocal); ok {
			out = append(out, Target{ID: "P3 vs ctr", What: "ctr import --local of every archive ÷ holdfast warm sync", Op: AtLeast, Limit: 100, Unit: "×"}.Evaluate(Ratio(ctr, warm)))
		}
	}
	if s := findStat(stats, ScenarioHeal, MethodAgent); s != nil {
		out = append(out, Target{ID: "P4 heal p99", What: "delete of a pinned record → back with both pin labels", Op: AtMost, Limit: 500, Unit: "ms"}.Evaluate(float64(s.P99)*1000))
	}
	if s := findStat(stats, ScenarioWatch, MethodAgent); s != nil {
		out = append(out, Target{ID: "P4 watch p99", What: "archive renamed into the images dir → pinned", Op: AtMost, Limit: 2, Unit: "s"}.Evaluate(float64(s.P99)))
	}
	for _, m := range []struct{ method, label string }{{MethodHoldfastDirect, "direct"}, {MethodHoldfastStream, "stream"}} {
		if s := findStat(stats, ScenarioP5, m.method); s != nil {
			v := math.NaN()
			if s.N > 0 {
				v = float64(s.MaxRSSBytes) / (1 << 20)
			}
			out = append(out, Target{ID: "P5 RSS (" + m.label + ")", What: "peak RSS of holdfast sync --write-path=" + m.label + " of the P5 archive", Op: AtMost, Limit: 100, Unit: "MiB"}.Evaluate(v))
		}
	}
	ratio(Target{ID: "P6 zst vs tar", What: "holdfast sync (direct) of the large .tar.zst ÷ of the same .tar", Op: AtMost, Limit: 1.3, Unit: "×"},
		ScenarioP1, MethodHoldfastZstDirect, MethodHoldfastDirect)
	ratio(Target{ID: "P6 zst vs decode floor", What: "holdfast sync .tar.zst (direct) ÷ zstd decode floor (the same decoder, to nothing)", Op: AtMost, Limit: 1.1, Unit: "×"},
		ScenarioP1, MethodHoldfastZstDirect, MethodZstdFloor)
	return out
}

package bench

import (
	"strings"
	"testing"
)

func TestOnlyP10(t *testing.T) {
	t.Parallel()
	c := Config{Tools: Tools{Holdfast: "h", Ctr: "c"}, Set: FullSet(), Rounds: 3, ZstdWindow: 8 << 20, Only: []string{"P10"}}
	if err := c.Validate(); err != nil {
		t.Fatalf("-only P10: %v", err)
	}
	if !c.runs("P10") || c.runs("P1") || c.runs("P9") {
		t.Errorf("-only P10 runs P10 %v, P1 %v, P9 %v", c.runs("P10"), c.runs("P1"), c.runs("P9"))
	}
}

// The pipeline fails when ctr fails (pipefail), quotes what it is given,
// exports with --local (the transfer service writes its progress to
// standard output too) and syncs what zstd wrote.
func TestP10CtrScript(t *testing.T) {
	t.Parallel()
	got := p10CtrScript("/b/ctr", "/usr/bin/zstd", "/c.sock", "/o/it's.tar.zst", []string{"bench.example/large/img-00:1"})
	want := `set -eo pipefail; '/b/ctr' -a '/c.sock' -n ` + Namespace + ` images export --local - 'bench.example/large/img-00:1' | '/usr/bin/zstd' -T0 -3 -q -o '/o/it'\''s.tar.zst'; sync '/o/it'\''s.tar.zst'`
	if got != want {
		t.Errorf("script\n%s\nwant\n%s", got, want)
	}
}

func TestP10Targets(t *testing.T) {
	t.Parallel()
	stats := []Stat{
		{Scenario: ScenarioP10, Method: MethodExport, N: 3, Median: 3.0, MaxRSSBytes: 200 << 20},
		{Scenario: ScenarioP10, Method: MethodCtrExportZstd, N: 3, Median: 2.5},
	}
	out := p10Targets(stats)
	if len(out) != 2 {
		t.Fatalf("%d targets, want 2", len(out))
	}
	if o := out[0]; !o.Met || float64(o.Value) != 1.2 {
		t.Errorf("ratio %v met %v; want 1.2, met", o.Value, o.Met)
	}
	if o := out[1]; o.Met || float64(o.Value) != 200 || !strings.Contains(o.Verdict(), "over") {
		t.Errorf("RSS %v: %s; want 200 MiB, missed", o.Value, o.Verdict())
	}
	if p10Targets(nil) != nil {
		t.Error("targets without P10's rows")
	}
}

package bench

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestWriteDurable(t *testing.T) {
	t.Parallel()
	for _, streams := range []int{1, 4} {
		dir := filepath.Join(t.TempDir(), "d")
		total := int64(3*floorChunk + 4096*streams) // not a whole number of writes
		total -= total % int64(streams)
		if err := WriteDurable(t.Context(), dir, total, streams); err != nil {
			t.Fatalf("%d streams: %v", streams, err)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != streams {
			t.Errorf("%d streams wrote %d files", streams, len(entries))
		}
		var sum int64
		for _, e := range entries {
			fi, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			if fi.Size() != total/int64(streams) {
				t.Errorf("%d streams: %s holds %d bytes, want %d", streams, e.Name(), fi.Size(), total/int64(streams))
			}
			sum += fi.Size()
		}
		if sum != total {
			t.Errorf("%d streams wrote %d bytes, want %d", streams, sum, total)
		}
	}
	if err := WriteDurable(t.Context(), t.TempDir(), 10, 4); err == nil {
		t.Errorf("10 bytes in 4 streams: no error")
	}
}

func TestMBPerSecond(t *testing.T) {
	t.Parallel()
	s := Stat{Median: 2, Bytes: 500e6}
	if got := s.MBPerSecond(); math.Abs(got-250) > 1e-9 {
		t.Errorf("500 MB in 2 s = %v MB/s, want 250", got)
	}
	for _, s := range []Stat{{Median: 2}, {Median: 0, Bytes: 1}, {Median: Float(math.NaN()), Bytes: 1}} {
		if got := s.MBPerSecond(); !math.IsNaN(got) {
			t.Errorf("%+v: %v MB/s, want NaN", s, got)
		}
	}
}

// Every holdfast sync the harness runs names its write path.
func TestSyncArgsNameTheWritePath(t *testing.T) {
	t.Parallel()
	for _, p := range []string{WriteDirect, WriteStream} {
		args := syncArgs("/run/c.sock", p, "/d", "/images")
		i := slices.Index(args, "--write-path")
		if args[0] != "sync" || i < 0 || i+1 >= len(args) || args[i+1] != p {
			t.Errorf("syncArgs(%s) = %q", p, args)
		}
	}
}

// The "÷ holdfast" column divides by the direct row of the same scenario
// (P3: the warm sync).
func TestBaselineIsDirect(t *testing.T) {
	t.Parallel()
	stats := []Stat{
		{Scenario: ScenarioP1, Method: MethodHoldfastStream},
		{Scenario: ScenarioP1, Method: MethodHoldfastDirect},
		{Scenario: ScenarioP3, Method: MethodHoldfastSetup},
		{Scenario: ScenarioP3, Method: MethodHoldfastWarm},
	}
	if b := baseline(stats, Stat{Scenario: ScenarioP1, Method: Method16Direct}); b == nil || b.Method != MethodHoldfastDirect {
		t.Errorf("P1 baseline = %+v", b)
	}
	if b := baseline(stats, Stat{Scenario: ScenarioP3, Method: MethodCtrLocal}); b == nil || b.Method != MethodHoldfastWarm {
		t.Errorf("P3 baseline = %+v", b)
	}
	if b := baseline(stats, Stat{Scenario: ScenarioP2, Method: MethodCtr}); b != nil {
		t.Errorf("P2 baseline without a P2 row = %+v", b)
	}
}

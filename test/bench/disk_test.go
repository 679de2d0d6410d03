package bench

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// A containerd that is missing or not 1.6 is named as the reason its rows
// are skipped.
func TestCheck16(t *testing.T) {
	t.Parallel()
	if why := check16(filepath.Join(t.TempDir(), "containerd")); why == "" {
		t.Errorf("a missing binary passes as containerd 1.6")
	}
	fake := filepath.Join(t.TempDir(), "containerd")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'containerd github.com/containerd/containerd/v2 v2.4.2 abc'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if why := check16(fake); why == "" {
		t.Errorf("containerd 2.4.2 passes as 1.6")
	}
	old := filepath.Join(t.TempDir(), "containerd")
	if err := os.WriteFile(old, []byte("#!/bin/sh\necho 'containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if why := check16(old); why != "" {
		t.Errorf("Debian's 1.6.20: %s", why)
	}
}

// P1's cold-cache rows drop the cache and no other does; without containerd
// 1.6 its rows are left out with a line saying why; the disk rate runs with
// P1 and alone.
func TestColdMethods(t *testing.T) {
	t.Parallel()
	var progress strings.Builder
	missing := filepath.Join(t.TempDir(), "containerd")
	h := &harness{cfg: Config{Set: QuickSet(), Rounds: 1, Containerd16: missing, Progress: &progress, Only: []string{"P1"}},
		arch: &Archives{Dir: t.TempDir(), Large: Archive{Bytes: 100}, LargeZst: Archive{Bytes: 60}}}
	var cold, methods []string
	for _, m := range h.coldMethods() {
		methods = append(methods, m.scenario+" / "+m.method)
		if m.coldCache {
			cold = append(cold, m.method)
		}
		if m.on16 {
			t.Errorf("%s runs on containerd 1.6, which is missing", m.method)
		}
		if m.scenario == ScenarioP1 && m.method != MethodFloor && m.method != MethodFloorColdCache && m.bytes <= 0 {
			t.Errorf("%s has no byte count", m.method)
		}
	}
	if !slices.Equal(cold, []string{MethodHoldfastColdCache, MethodFloorColdCache}) {
		t.Errorf("cold-cache methods %q", cold)
	}
	for _, want := range []string{ScenarioP1 + " / " + MethodHoldfastDirect, ScenarioP1 + " / " + MethodHoldfastStream,
		ScenarioP1 + " / " + MethodHoldfastZstStream, ScenarioP1 + " / " + MethodZstdFloor, ScenarioDisk + " / " + MethodDisk4} {
		if !slices.Contains(methods, want) {
			t.Errorf("no %s in %q", want, methods)
		}
	}
	if !strings.Contains(progress.String(), "skipping the P1 rows on containerd 1.6") || !strings.Contains(progress.String(), missing) {
		t.Errorf("no line saying why the 1.6 rows are skipped: %q", progress.String())
	}
	h.cfg.Only = []string{"disk"}
	if ms := h.coldMethods(); len(ms) != 2 || ms[0].scenario != ScenarioDisk {
		t.Errorf("-only disk: %d methods", len(ms))
	}
}

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs the whole harness in quick mode: tiny archives, one round,
// real containerds, holdfast and ctr. It takes about a minute, so it runs
// only with HOLDFAST_BENCH_SMOKE=1 (as root).
func TestSmoke(t *testing.T) {
	smokeGate(t, "set HOLDFAST_BENCH_SMOKE=1 to run the bench harness end to end in quick mode (root, about a minute)")
	ctx, tmp, cfg := smokeConfig(t, "hfb-smoke-", "smoke")
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, cfg.Progress)
	}
	for _, s := range res.Samples {
		if s.Error != "" {
			t.Errorf("%s / %s #%d failed: %s", s.Scenario, s.Method, s.Round, s.Error)
		}
	}
	want := map[string][]string{
		ScenarioP1: {MethodHoldfastDirect, MethodHoldfastStream, MethodCtr, MethodCtrLocal, MethodFloor,
			MethodHoldfastZstDirect, MethodHoldfastZstStream, MethodZstdFloor, MethodHoldfastColdCache, MethodFloorColdCache},
		ScenarioDisk:    {MethodDisk1, MethodDisk4},
		ScenarioP1Small: {MethodHoldfastDirect, MethodHoldfastStream, MethodCtr, MethodCtrLocal, MethodFloor},
		ScenarioP2:      {MethodHoldfastDirect, MethodHoldfastStream, MethodCtr, MethodCtrLocal},
		ScenarioP3:      {MethodHoldfastSetup, MethodHoldfastWarm, MethodHoldfastNoCache, MethodProcessStart, MethodCtrLocal},
		ScenarioHeal:    {MethodAgent},
		ScenarioWatch:   {MethodAgent},
		ScenarioP5:      {MethodHoldfastDirect, MethodHoldfastStream},
		ScenarioP7:      {MethodHoldfastZstDirect, MethodHoldfastHaul},
	}
	if why := check16(DefaultContainerd16); why == "" {
		want[ScenarioP1] = append(want[ScenarioP1], Method16Stream, Method16Direct, Method16CtrLocal)
	} else {
		t.Logf("no rows on containerd 1.6: %s", why)
	}
	if why := peersMissing(); why == "" {
		want[ScenarioP8] = []string{MethodPeer, MethodImportOnB}
	} else {
		t.Logf("no P8 rows: %s", why)
	}
	for scenario, methods := range want {
		for _, m := range methods {
			if s := findStat(res.Stats, scenario, m); s == nil || s.N == 0 {
				t.Errorf("no successful sample of %s / %s", scenario, m)
			}
		}
	}
	if s := findStat(res.Stats, ScenarioHeal, MethodAgent); s != nil && s.N != cfg.Set.Heal.Count {
		t.Errorf("%d heal samples, want %d", s.N, cfg.Set.Heal.Count)
	}
	for _, o := range res.Targets {
		if o.Missing {
			t.Errorf("target %s: no data", o.ID)
		}
	}
	if s := findStat(res.Stats, ScenarioDisk, MethodDisk4); s != nil && s.Bytes != cfg.Set.DiskBytes {
		t.Errorf("disk rate wrote %d bytes, want %d", s.Bytes, cfg.Set.DiskBytes)
	}
	// Every target is evaluated: the run measured every scenario.
	ids := map[string]bool{}
	for _, o := range res.Targets {
		ids[o.ID] = true
	}
	for _, id := range []string{"P1 CPU per GiB", "P1 containerd CPU per GiB", "P1 vs ctr", "P1 vs ctr --local", "P1 vs floor",
		"P1s vs ctr", "P2 vs ctr", "P3 warm sync", "P3 vs ctr", "P4 heal p99", "P4 watch p99", "P5 RSS (direct)", "P5 RSS (stream)", "P6 zst vs tar",
		"P10 export vs ctr + zstd", "P10 export RSS"} {
		if !ids[id] {
			t.Errorf("target %q not evaluated", id)
		}
	}
	if res.Machine.ContainerdVersion == "" || res.Machine.CPUs == 0 || res.Machine.Filesystem == "" {
		t.Errorf("machine facts incomplete: %+v", res.Machine)
	}

	var report strings.Builder
	if err := WriteReport(&report, res); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"| P1 ", "| P4 heal", "P6 zst vs tar", "| P5 ", "| disk ", " MB/s", MethodHoldfastColdCache} {
		if !strings.Contains(report.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, report.String())
		}
	}
	out := filepath.Join(tmp, "latest.json")
	if err := WriteJSON(out, res); err != nil {
		t.Fatal(err)
	}
	var back Results
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &back); err != nil || len(back.Samples) != len(res.Samples) {
		t.Errorf("the JSON does not read back (%v)", err)
	}
	// Nothing is left: the work dir is gone, and (checked when the test
	// ends, however it ends) no containerd or agent runs.
	left, _ := filepath.Glob(filepath.Join(tmp, "hfb-*"))
	if len(left) > 0 {
		t.Errorf("work dir left behind: %v", left)
	}
}

// processesOf lists the live processes whose executable lies under dir or
// whose command line names it (a containerd started with a config there).
func processesOf(dir string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if e.Name() == strconv.Itoa(os.Getpid()) {
			continue
		}
		exe, _ := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")
		if strings.HasPrefix(exe, dir+"/") || strings.Contains(args, dir) {
			out = append(out, e.Name()+": "+args)
		}
	}
	return out
}

// smokeGate skips a smoke test unless HOLDFAST_BENCH_SMOKE=1, and fails it
// when not root: the harness starts containerd.
func smokeGate(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("HOLDFAST_BENCH_SMOKE") != "1" {
		t.Skip(why)
	}
	if os.Geteuid() != 0 {
		t.Fatal("HOLDFAST_BENCH_SMOKE=1 asks for the bench harness, which starts containerd: run as root")
	}
}

// smokeConfig makes a smoke run's work dir (prefix: short, as containerd's
// socket paths must stay within 104 bytes), builds the tools into it, and
// gives a quick one-round Config, its progress in a buffer, with a context
// of ten minutes. Whatever happens, nothing the harness started may outlive
// the test: no containerd (holdfast-containerd), agent or ctr built or run
// under the dir.
func smokeConfig(t *testing.T, prefix, command string) (context.Context, string, Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	t.Cleanup(cancel)
	tmp, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	t.Cleanup(func() {
		if procs := processesOf(tmp); len(procs) > 0 {
			t.Errorf("processes left behind: %v", procs)
		}
	})
	tools, err := BuildTools(ctx, filepath.Join(tmp, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	return ctx, tmp, Config{Tools: tools, Set: QuickSet(), Rounds: 1, ZstdWindow: 8 << 20, WorkDir: tmp, Progress: &bytes.Buffer{}, Command: command}
}

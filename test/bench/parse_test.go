package bench

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseSummary(t *testing.T) {
	t.Parallel()
	out := "conflict: something\nsync: 4 imported, 16 unchanged, 1 healed, 0 unpinned, 0 failed; 9 images pinned, 0 released, 0 drift, 0 conflicts; 3.1 MiB read in 412ms\n"
	s, err := parseSummary(out)
	if err != nil {
		t.Fatal(err)
	}
	if s.Imported != 4 || s.Unchanged != 16 || s.Healed != 1 || s.Failed != 0 || s.Duration != 412*time.Millisecond {
		t.Errorf("parseSummary = %+v", s)
	}
	if summaryLine(out) != strings.TrimSpace(strings.Split(out, "\n")[1]) {
		t.Errorf("summaryLine = %q", summaryLine(out))
	}
	if _, err := parseSummary("sync: 0 imported, 0 unchanged, 0 healed, 0 unpinned, 2 failed; 0 images pinned; 0 B read in 1ms"); err == nil {
		t.Errorf("a summary with failures: no error")
	}
	if _, err := parseSummary("nothing here"); err == nil {
		t.Errorf("no summary line: no error")
	}
}

func TestProcFacts(t *testing.T) {
	t.Parallel()
	if _, err := processCPU(os.Getpid()); err != nil {
		t.Errorf("processCPU(self): %v", err)
	}
	if hwm := readHWM("/proc/self/status"); hwm <= 0 {
		t.Errorf("readHWM(self) = %d", hwm)
	}
	if hwm := readHWM("/proc/0/nonexistent"); hwm != 0 {
		t.Errorf("readHWM(missing) = %d", hwm)
	}
	// A child below the harness's own peak is measured by its samples.
	if got := childMaxRSS(1, 5); got != 5 {
		t.Errorf("childMaxRSS below the harness's peak = %d, want the sampled 5", got)
	}
	if got := childMaxRSS(1<<50, 5); got != 1<<50 {
		t.Errorf("childMaxRSS above the harness's peak = %d, want the rusage value", got)
	}
	if fs := filesystemOf(t.TempDir()); fs == "" {
		t.Errorf("filesystemOf(temp dir) is empty")
	}
	if got := unescapeMount(`/mnt/with\040space`); got != "/mnt/with space" {
		t.Errorf("unescapeMount = %q", got)
	}
}

func TestWriteTable(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	writeTable(&b, []string{"a", "long header"}, [][]string{{"xyz", "1"}, {"é", "22"}})
	want := "| a   | long header |\n| --- | ----------- |\n| xyz | 1           |\n| é   | 22          |\n"
	if b.String() != want {
		t.Errorf("writeTable:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := Config{Tools: Tools{Holdfast: "h", Ctr: "c"}, Set: QuickSet(), Rounds: 1, ZstdWindow: 8 << 20}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	full := ok
	full.Set, full.Only = FullSet(), []string{"P5", "disk"}
	if err := full.Validate(); err != nil {
		t.Fatalf("the full set with -only P5,disk: %v", err)
	}
	for name, mutate := range map[string]func(*Config){
		"no tools":        func(c *Config) { c.Tools = Tools{} },
		"no rounds":       func(c *Config) { c.Rounds = 0 },
		"odd window":      func(c *Config) { c.ZstdWindow = 3 << 20 },
		"unknown only":    func(c *Config) { c.Only = []string{"P99"} },
		"empty shape":     func(c *Config) { c.Set.Warm.Count = 0 },
		"shape no format": func(c *Config) { c.Set.Large.Formats = nil },
		"no huge layers":  func(c *Config) { c.Set.Huge.Layers = 0 },
		"no disk bytes":   func(c *Config) { c.Set.DiskBytes = 0 },
		"odd disk bytes":  func(c *Config) { c.Set.DiskBytes = 5 << 20 },
	} {
		c := ok
		c.Set = QuickSet()
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

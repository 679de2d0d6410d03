package bench

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/archive/zstdframe"
	"github.com/holdfast-project/holdfast/internal/fixture"
)

func TestOnlyP9(t *testing.T) {
	t.Parallel()
	c := Config{Tools: Tools{Holdfast: "h", Ctr: "c"}, Set: FullSet(), Rounds: 3, ZstdWindow: 8 << 20, Only: []string{"P9"}}
	if err := c.Validate(); err != nil {
		t.Fatalf("-only P9: %v", err)
	}
	if !c.runs("P9") || c.runs("P1") || c.runs("P7") {
		t.Errorf("-only P9 runs P9 %v, P1 %v, P7 %v", c.runs("P9"), c.runs("P1"), c.runs("P7"))
	}
}

// Every P9 row has a name of its own; the plain tar on all CPUs is the
// scenario's baseline, the row the report's "÷ holdfast" divides by.
func TestP9MethodNames(t *testing.T) {
	t.Parallel()
	if m := p9ImportMethod(p9Tar, p9AllCPUs); m != MethodHoldfastDirect {
		t.Errorf("the plain tar on all CPUs is %q, want the baseline %q", m, MethodHoldfastDirect)
	}
	names := p9MethodNames(p9CPUSets)
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			t.Errorf("method %q named twice", n)
		}
		seen[n] = true
	}
	for _, c := range []struct{ got, want string }{
		{p9ImportMethod(p9Pzstd, p9OneCPU), "holdfast sync .tar.zst pzstd (direct, taskset -c 0)"},
		{p9ImportMethod(p9Tar, p9TwoCPUs), "holdfast sync (direct, taskset -c 0,1)"},
		{p9ImportMethod(p9Export, p9AllCPUs), "holdfast sync export .tar.zst (direct)"},
		{p9DecodeMethod(p9Pzstd, 1), "zstd decode .tar.zst pzstd, 1 worker"},
		{p9DecodeMethod(p9Export, 2), "zstd decode export .tar.zst, 2 workers"},
	} {
		if c.got != c.want {
			t.Errorf("method %q, want %q", c.got, c.want)
		}
	}
}

func TestP9Args(t *testing.T) {
	t.Parallel()
	bin, args := p9SyncArgs("/usr/bin/taskset", "/b/holdfast", p9AllCPUs, "/c.sock", "/d", "/i")
	if bin != "/b/holdfast" || !slices.Equal(args, syncArgs("/c.sock", WriteDirect, "/d", "/i")) {
		t.Errorf("on all CPUs: %s %q", bin, args)
	}
	bin, args = p9SyncArgs("/usr/bin/taskset", "/b/holdfast", p9OneCPU, "/c.sock", "/d", "/i")
	want := append([]string{"-c", "0", "/b/holdfast"}, syncArgs("/c.sock", WriteDirect, "/d", "/i")...)
	if bin != "/usr/bin/taskset" || !slices.Equal(args, want) {
		t.Errorf("on CPU 0: %s %q, want taskset %q", bin, args, want)
	}
	if !slices.Contains(args, "--write-path") {
		t.Errorf("the sync names no write path: %q", args)
	}
	if got := p9PzstdArgs("/a/large.tar", "/p/large.tar.zst"); !slices.Equal(got, []string{"-p", "2", "-3", "-o", "/p/large.tar.zst", "/a/large.tar"}) {
		t.Errorf("pzstd %q", got)
	}
	got := p9ExportArgs("/c.sock", "/d", "/e/x.tar.zst", []string{"bench.example/large/img-00:1"})
	want = []string{"export", "--address", "/c.sock", "--namespace", Namespace, "--data-dir", "/d", "-o", "/e/x.tar.zst", "bench.example/large/img-00:1"}
	if !slices.Equal(got, want) {
		t.Errorf("export %q, want %q", got, want)
	}
}

// Without pzstd, P9 says what it lacks and where it comes from.
func TestLookPzstdMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := lookPzstd()
	if err == nil || !strings.Contains(err.Error(), "pzstd is not on PATH") || !strings.Contains(err.Error(), "zstd package") {
		t.Errorf("lookPzstd without pzstd: %v", err)
	}
}

func TestP9Sets(t *testing.T) {
	t.Parallel()
	sets, taskset, skipped := p9Sets()
	if len(sets) == 0 || sets[0] != p9AllCPUs {
		t.Fatalf("sets %q: the unrestricted one first", sets)
	}
	if len(sets)+len(skipped) != len(p9CPUSets) {
		t.Errorf("sets %q and skipped %q do not add up to %q", sets, skipped, p9CPUSets)
	}
	if len(sets) > 1 && taskset == "" {
		t.Errorf("restricted sets %q without taskset", sets)
	}
}

// p9Data is n bytes, half text, half random, as the bench's layers.
func p9Data(n int) []byte {
	text := bytes.Repeat([]byte("holdfast zstd frames "), n/2/21+1)[:n/2]
	r := rand.New(rand.NewPCG(9, 9))
	random := make([]byte, n-n/2)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	return append(text, random...)
}

func TestCountZstdFrames(t *testing.T) {
	t.Parallel()
	data := p9Data(600 << 10)
	one, err := fixture.CompressBytes(fixture.Zstd, fixture.CompressOptions{ZstdWindow: 1 << 20}, data)
	if err != nil {
		t.Fatal(err)
	}
	rle, err := fixture.CompressBytes(fixture.Zstd, fixture.CompressOptions{ZstdWindow: 1 << 20}, bytes.Repeat([]byte{'x'}, 300<<10))
	if err != nil {
		t.Fatal(err)
	}
	var seekable bytes.Buffer
	w := zstdframe.NewWriter(&seekable, zstdframe.Options{FrameSize: 64 << 10})
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	skippable := []byte{0x5a, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 'a', 'b', 'c'}
	for _, c := range []struct {
		name string
		b    []byte
		want zstdFrameCount
	}{
		{"one frame", one, zstdFrameCount{Frames: 1}},
		{"one frame of one byte repeated", rle, zstdFrameCount{Frames: 1}},
		{"concatenated", slices.Concat(one, skippable, rle, one), zstdFrameCount{Frames: 3, Skippable: 1}},
		{"seekable", seekable.Bytes(), zstdFrameCount{Frames: 10, Skippable: 1}},
		{"empty", nil, zstdFrameCount{}},
	} {
		got, err := countZstdFrames(bytes.NewReader(c.b))
		if err != nil || got != c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
	for _, c := range []struct {
		name string
		b    []byte
	}{
		{"cut in a block", one[:len(one)/2]},
		{"cut in the checksum", one[:len(one)-2]},
		{"cut in a magic", append(slices.Clone(one), one[:2]...)},
		{"cut in a skippable frame", slices.Concat(one, skippable[:9])},
		{"not zstd", append(slices.Clone(one), []byte("ustar\x00\x00\x00")...)},
	} {
		if got, err := countZstdFrames(bytes.NewReader(c.b)); err == nil {
			t.Errorf("%s: %+v, no error", c.name, got)
		}
	}
}

// pzstd's output, as P9 makes it, is many frames, each behind a skippable
// frame with its size, and decodes to the input with one worker and with two.
func TestP9Pzstd(t *testing.T) {
	t.Parallel()
	pzstd, err := lookPzstd()
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "a.tar"), filepath.Join(dir, "a.tar.zst")
	data := p9Data(40 << 20)
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.CommandContext(t.Context(), pzstd, p9PzstdArgs(in, out)...).CombinedOutput(); err != nil {
		t.Fatalf("pzstd: %v: %s", err, b)
	}
	c, err := countZstdFramesFile(out)
	if err != nil || c.Frames < 2 || c.Skippable != c.Frames {
		t.Errorf("pzstd wrote %v (%v); want several frames, each behind a skippable frame", c, err)
	}
	for _, workers := range []int{0, 1, 2} {
		n, err := DrainFloor(t.Context(), out, workers)
		if err != nil || n != int64(len(data)) {
			t.Errorf("DrainFloor with %d workers: %d, %v; want %d bytes", workers, n, err, len(data))
		}
	}
	if n, err := DrainFloor(t.Context(), in, 0); err != nil || n != int64(len(data)) {
		t.Errorf("DrainFloor of the plain file: %d, %v", n, err)
	}
	b, _ := os.ReadFile(out)
	cut := filepath.Join(dir, "cut.tar.zst")
	if err := os.WriteFile(cut, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := DrainFloor(t.Context(), cut, 2); err == nil {
		t.Errorf("DrainFloor of a cut-off stream: no error")
	}
}

func p9Stat(method string, median, client, cd float64, bytes int64) Stat {
	return Stat{Scenario: ScenarioP9, Method: method, N: 3, Median: Float(median), Min: Float(median * 0.9), Max: Float(median * 1.1),
		ClientCPU: Float(client), ContainerdCPU: Float(cd), Bytes: bytes}
}

func TestP9TargetsAndReport(t *testing.T) {
	t.Parallel()
	if out := p9Targets([]Stat{{Scenario: ScenarioP1, Method: MethodHoldfastDirect, N: 3, Median: 1}}); out != nil {
		t.Errorf("targets without P9: %+v", out)
	}
	stats := []Stat{
		p9Stat(p9ImportMethod(p9Tar, p9AllCPUs), 1.0, 1.5, 0.05, 1<<30),
		p9Stat(p9ImportMethod(p9One, p9AllCPUs), 2.0, 2.0, 0.05, 600<<20),
		p9Stat(p9ImportMethod(p9Pzstd, p9AllCPUs), 1.2, 2.2, 0.05, 610<<20),
		p9Stat(p9ImportMethod(p9Export, p9AllCPUs), 1.6, 2.2, 0.05, 620<<20),
		p9Stat(p9ImportMethod(p9One, p9OneCPU), 3.0, 2.0, 0.05, 600<<20),
		p9Stat(p9ImportMethod(p9One, p9TwoCPUs), 2.0, 2.0, 0.05, 600<<20),
		p9Stat(p9ImportMethod(p9Pzstd, p9OneCPU), 3.0, 2.0, 0.05, 610<<20),
		p9Stat(p9ImportMethod(p9Pzstd, p9TwoCPUs), 1.5, 2.0, 0.05, 610<<20),
		p9Stat(p9FloorMethod(p9Pzstd), 0.4, 0.8, 0, 610<<20),
		p9Stat(p9DecodeMethod(p9Pzstd, 1), 0.8, 0.8, 0, 610<<20),
		p9Stat(p9DecodeMethod(p9Pzstd, 2), 0.44, 0.8, 0, 610<<20),
		{Scenario: ScenarioP9, Method: p9DecodeMethod(p9Export, 1), Failed: 3, Median: Float(math.NaN())},
		p9Stat(p9DecodeMethod(p9Export, 2), 0.5, 0.8, 0, 620<<20),
	}
	want := map[string]struct {
		v       float64
		verdict string
	}{
		"P9 pzstd vs one frame":          {0.6, "met"},
		"P9 pzstd vs tar":                {1.2, "met"},
		"P9 pzstd decode 2 ÷ 1 workers":  {0.55, "met"},
		"P9 export vs one frame":         {0.8, "met"},
		"P9 export vs tar":               {1.6, "missed: 1.14× over"},
		"P9 export decode 2 ÷ 1 workers": {math.NaN(), "no data"},
	}
	out := p9Targets(stats)
	if len(out) != len(want) {
		t.Fatalf("%d targets, want %d: %+v", len(out), len(want), out)
	}
	for _, o := range out {
		w, ok := want[o.ID]
		if !ok {
			t.Errorf("unexpected target %q", o.ID)
			continue
		}
		if o.Verdict() != w.verdict || !math.IsNaN(w.v) && math.Abs(float64(o.Value)-w.v) > 1e-9 {
			t.Errorf("%s: %v %q, want %v %q", o.ID, o.Value, o.Verdict(), w.v, w.verdict)
		}
	}

	r := &Results{Stats: stats, Archives: &Archives{Large: Archive{Bytes: 1 << 30}}}
	var b strings.Builder
	if err := WriteP9Report(&b, r); err != nil {
		t.Fatal(err)
	}
	report := b.String()
	for _, c := range []struct {
		lead []string // the row's first cells
		col  int      // the cell to check
		want string
	}{
		{[]string{".tar.zst, pzstd -p 2 -3", "all CPUs"}, 3, "1.20 s"},
		{[]string{".tar.zst, pzstd -p 2 -3", "all CPUs"}, 9, "2.25 CPU-s"}, // (2.2 + 0.05) ÷ 1 GiB
		{[]string{".tar.zst, pzstd -p 2 -3", "all CPUs"}, 10, "1.20×"},     // ÷ .tar
		{[]string{".tar.zst, pzstd -p 2 -3", "all CPUs"}, 11, "0.6×"},      // ÷ one frame
		{[]string{".tar.zst, one frame", "all CPUs"}, 11, ""},
		{[]string{".tar.zst, pzstd -p 2 -3", "CPU 0"}, 10, ""},      // no .tar on CPU 0
		{[]string{".tar.zst, pzstd -p 2 -3", "3.00 s"}, 4, "2.00×"}, // CPU 0 ÷ CPUs 0,1
		{[]string{".tar.zst, one frame", "3.00 s"}, 4, "1.50×"},
		{[]string{".tar.zst, pzstd -p 2 -3", "default"}, 7, "3.00×"}, // import ÷ floor: 1.2 ÷ 0.4
		{[]string{".tar.zst, pzstd -p 2 -3", "1"}, 6, ""},
		{[]string{".tar.zst, pzstd -p 2 -3", "2"}, 6, "0.55×"},
		{[]string{".tar.zst, holdfast export", "1"}, 4, "0 (3 failed)"},
		{[]string{".tar.zst, holdfast export", "2"}, 6, ""}, // no successful 1-worker sample
	} {
		row := tableRow(report, c.lead...)
		if row == nil {
			t.Errorf("no row %q in the report:\n%s", c.lead, report)
			continue
		}
		if c.col >= len(row) || row[c.col] != c.want {
			t.Errorf("row %q: cell %d of %q, want %q", c.lead, c.col, row, c.want)
		}
	}
	b.Reset()
	if err := WriteP9Report(&b, &Results{Stats: stats[4:], Archives: r.Archives}); err != nil || b.Len() != 0 {
		t.Errorf("without the baseline the P9 report is %q, %v; want nothing", b.String(), err)
	}
}

// tableRow is the cells of the first Markdown table row of report that
// begins with the cells lead, or nil.
func tableRow(report string, lead ...string) []string {
	for _, line := range strings.Split(report, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			cells = append(cells, strings.TrimSpace(c))
		}
		if len(cells) >= len(lead) && slices.Equal(cells[:len(lead)], lead) {
			return cells
		}
	}
	return nil
}

// TestSmokeP9 runs P9 alone through the harness in quick mode: tiny
// archives, one round, real containerds, holdfast, pzstd and taskset. Like
// TestSmoke, only with HOLDFAST_BENCH_SMOKE=1, as root.
func TestSmokeP9(t *testing.T) {
	smokeGate(t, "set HOLDFAST_BENCH_SMOKE=1 to run P9 end to end in quick mode (root)")
	ctx, tmp, cfg := smokeConfig(t, "hfb-p9-", "smoke P9")
	cfg.Only = []string{"P9"}
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, cfg.Progress)
	}
	for _, s := range res.Samples {
		if s.Error != "" {
			t.Errorf("%s / %s #%d failed: %s", s.Scenario, s.Method, s.Round, s.Error)
		}
		if s.Scenario != ScenarioP9 {
			t.Errorf("-only P9 measured %s / %s", s.Scenario, s.Method)
		}
	}
	sets, _, _ := p9Sets()
	want := p9MethodNames(sets)
	for _, m := range want {
		if s := findStat(res.Stats, ScenarioP9, m); s == nil || s.N == 0 {
			t.Errorf("no successful sample of P9 / %s", m)
		}
	}
	if n := len(p9Targets(res.Stats)); n != 6 {
		t.Errorf("%d P9 targets, want 6", n)
	}
	for _, o := range res.Targets {
		if o.Missing {
			t.Errorf("target %s: no data", o.ID)
		}
	}
	var report strings.Builder
	if err := WriteReport(&report, res); err != nil {
		t.Fatal(err)
	}
	if err := WriteP9Report(&report, res); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"| P9 ", "P9 pzstd vs tar", ".tar.zst, holdfast export", "CPU per GiB"} {
		if !strings.Contains(report.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, report.String())
		}
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "hfb-*")); len(left) > 0 {
		t.Errorf("work dir left behind: %v", left)
	}
}

// p9MethodNames are P9's rows with holdfast on each of the CPU sets: the
// imports, the decode floors, the decodes with 1 and 2 workers.
func p9MethodNames(sets []string) []string {
	var names []string
	for _, cpus := range sets {
		for _, f := range p9Files {
			names = append(names, p9ImportMethod(f, cpus))
		}
	}
	for _, f := range p9Files {
		names = append(names, p9FloorMethod(f))
	}
	for _, f := range p9MultiFrame {
		for _, w := range p9Workers {
			names = append(names, p9DecodeMethod(f, w))
		}
	}
	return names
}

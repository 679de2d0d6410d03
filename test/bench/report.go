package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// WriteReport writes the results as Markdown: what was measured, the
// measurements, the latencies and the targets.
func WriteReport(w io.Writer, r *Results) error {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "holdfast bench: archive set %q, %d round(s), contenders alternating within each round; medians of the rounds.\n", c.Set.Name, c.Rounds)
	fmt.Fprintf(&b, "Cold imports: a fresh embedded containerd (new data dir) per measurement (or a fresh Debian containerd 1.6 for the rows so named), "+
		"namespace %s, archives in the page cache (but for the cold-cache rows); every holdfast run names its --write-path.\n\n", c.Namespace)
	if r.Archives != nil {
		b.WriteString(describeScenarios(r))
		b.WriteString("\n")
	}

	var rows [][]string
	var noisy []string
	for _, s := range r.Stats {
		if s.Scenario == ScenarioHeal || s.Scenario == ScenarioWatch || s.Scenario == ScenarioDisk {
			continue
		}
		vs := ""
		if base := baseline(r.Stats, s); base != nil && base.Method != s.Method && s.Method != MethodHoldfastSetup {
			vs = fmtNum(Ratio(float64(s.Median), float64(base.Median))) + "×"
		}
		rss := ""
		if s.MaxRSSBytes > 0 {
			rss = formatBytes(s.MaxRSSBytes)
		}
		cd := formatSeconds(float64(s.ContainerdCPU))
		if s.Method == MethodFloor || s.Method == MethodFloorColdCache || s.Method == MethodZstdFloor {
			cd = "–"
		}
		rows = append(rows, []string{s.Scenario, s.Method, formatSeconds(float64(s.Median)),
			formatSeconds(float64(s.Min)) + " – " + formatSeconds(float64(s.Max)), countString(s),
			formatSeconds(float64(s.ClientCPU)), cd, formatSeconds(float64(s.OtherCPU)), rss, vs})
		if float64(s.Max) > 1.5*float64(s.Min) {
			noisy = append(noisy, fmt.Sprintf("%s / %s (%s – %s)", s.Scenario, s.Method, formatSeconds(float64(s.Min)), formatSeconds(float64(s.Max))))
		}
	}
	if len(rows) > 0 {
		writeTable(&b, []string{"scenario", "method", "median", "min – max", "n", "client CPU", "containerd CPU", "other CPU", "max RSS", "÷ holdfast"}, rows)
		b.WriteString("\nMedians of: client CPU, user + system time of the importing process(es) (the harness itself for the floor); " +
			"containerd CPU, of the containerd process meanwhile; other CPU, the rest of the machine meanwhile (other work, kernel I/O threads). " +
			"max RSS: the largest of the rounds. ÷ holdfast: this median ÷ holdfast sync (direct)'s in the same scenario " +
			"(the rows on containerd 1.6 and the cold-cache rows too: P1's direct row on the embedded containerd with the archive in the page cache; in P3, ÷ the warm sync; in P8, ÷ the import on B).\n")
		b.WriteString(peerNote(r.Stats))
		if len(noisy) > 0 {
			fmt.Fprintf(&b, "\nNoisy (slowest round > 1.5× the fastest): %s.\n", strings.Join(noisy, "; "))
		}
		b.WriteString("\n")
	}

	rows = nil
	for _, s := range r.Stats {
		if s.Scenario != ScenarioDisk {
			continue
		}
		rows = append(rows, []string{s.Scenario, s.Method, formatBytes(s.Bytes), formatSeconds(float64(s.Median)),
			formatSeconds(float64(s.Min)) + " – " + formatSeconds(float64(s.Max)), countString(s), fmtNum(s.MBPerSecond()) + " MB/s"})
	}
	if len(rows) > 0 {
		writeTable(&b, []string{"disk", "method", "bytes", "median", "min – max", "n", "rate (median)"}, rows)
		b.WriteString("\nThe disk's own durable write rate in the work dir's filesystem: 1 MiB − 4 KiB writes, fsync at the end of each file; " +
			"1 stream: one file, 4 streams: 4 goroutines writing a quarter each. MB/s: 10^6 bytes per second of the median.\n\n")
	}

	rows = nil
	for _, s := range r.Stats {
		if s.Scenario != ScenarioHeal && s.Scenario != ScenarioWatch {
			continue
		}
		rows = append(rows, []string{s.Scenario, countString(s), formatSeconds(float64(s.P50)), formatSeconds(float64(s.P99)), formatSeconds(float64(s.Max))})
	}
	if len(rows) > 0 {
		writeTable(&b, []string{"latency", "n", "p50", "p99", "max"}, rows)
		b.WriteString("\n")
	}

	rows = nil
	for _, o := range r.Targets {
		rows = append(rows, []string{o.ID, o.What, o.ValueString(), o.LimitString(), o.Verdict()})
	}
	if len(rows) > 0 {
		writeTable(&b, []string{"target", "what", "measured", "target", "verdict"}, rows)
	}
	if n := r.Failed(); n > 0 {
		fmt.Fprintf(&b, "\n%d sample(s) failed:\n", n)
		for _, s := range r.Samples {
			if s.Error != "" {
				fmt.Fprintf(&b, "- %s / %s #%d: %s\n", s.Scenario, s.Method, s.Round, firstLineOf(s.Error))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// peerNote says what P8's rows count and splits the peer method's median:
// node A's import, then B's pull through the peers and its pin; "" without
// P8.
func peerNote(stats []Stat) string {
	p := findStat(stats, ScenarioP8, MethodPeer)
	if p == nil || p.N == 0 {
		return ""
	}
	return fmt.Sprintf("\nP8: %s (median): A's import %s, then B's pull through the peers and its pin %s (medians of the rounds' parts: they need not add up); "+
		"its client CPU is A's holdfast import, B's holdfast run and both spegels, its containerd CPU both containerds'; its max RSS is A's import's.\n",
		formatSeconds(float64(p.Median)), formatSeconds(float64(p.ImportMedian)), formatSeconds(float64(p.AfterImportMedian)))
}

// baseline is the holdfast stat (the direct write path's, the default to
// be; in P3, the warm sync) a scenario's other methods are compared with.
func baseline(stats []Stat, s Stat) *Stat {
	method := MethodHoldfastDirect
	switch s.Scenario {
	case ScenarioP3:
		method = MethodHoldfastWarm
	case ScenarioP8:
		method = MethodImportOnB
	}
	return findStat(stats, s.Scenario, method)
}

func countString(s Stat) string {
	if s.Failed > 0 {
		return fmt.Sprintf("%d (%d failed)", s.N, s.Failed)
	}
	return fmt.Sprint(s.N)
}

// describeScenarios says what each scenario imports.
func describeScenarios(r *Results) string {
	a, set := r.Archives, r.Config.Set
	var b strings.Builder
	line := func(id, what string, s Shape, archives ...Archive) {
		var total int64
		for _, x := range archives {
			total += x.Bytes
		}
		fmt.Fprintf(&b, "- %s: %s: %d archive(s), %s, plain tar, each one image of %d layer(s) × %s (half text, half random bytes); %s on disk\n",
			id, what, len(archives), formatsOf(archives), s.Layers, formatBytes(s.LayerSize), formatBytes(total))
	}
	line("P1, P6", "cold import of the large archive", set.Large, a.Large)
	fmt.Fprintf(&b, "  and the same as .tar.zst (zstd window %s declared in the frame, %s): %s on disk\n",
		formatBytes(int64(a.LargeZst.ZstdWindow)), r.Config.ZstdLevel, formatBytes(a.LargeZst.Bytes))
	fmt.Fprintf(&b, "  each with --write-path=direct and =stream; also direct with the page cache dropped first (and the floor so), and on Debian's containerd 1.6 when installed\n")
	fmt.Fprintf(&b, "  zstd decode floor: the .tar.zst decompressed to nothing in the harness, with holdfast's decoder and options, the least its import can take\n")
	line("P1s", "cold import of many small layers (per-blob fsync)", set.Small, a.Small)
	line("P2", "cold import of several archives", set.Medium, a.Medium...)
	line("P3", "warm sync on a running containerd, every archive unchanged (set up with --write-path=direct)", set.Warm, a.Warm...)
	fmt.Fprintf(&b, "- P4 heal: under `holdfast run --settle 1s`, each of %d images (one archive) deleted once with ImageService().Delete; time until its record is back with both pin labels\n", len(a.Heal.Names))
	fmt.Fprintf(&b, "- P4 watch: %d archives (%d layer(s) × %s each) renamed one by one into the images dir, mtime an hour old; time until the record is pinned\n",
		len(a.Watch), set.Watch.Layers, formatBytes(set.Watch.LayerSize))
	if findStat(r.Stats, ScenarioP5, MethodHoldfastDirect) != nil {
		fmt.Fprintf(&b, "- P5: peak RSS of a cold holdfast sync, direct and stream, of one archive of %d layers × %s (%s, generated for P5 and deleted after; %d round)\n",
			set.Huge.Layers, formatBytes(set.Huge.LayerSize), formatName(set.Huge.Formats[0]), p5Rounds)
	}
	if findStat(r.Stats, ScenarioP8, MethodImportOnB) != nil {
		fmt.Fprintf(&b, "- P8: the large archive, `holdfast import`ed on node A, until node B holds it pinned: B's `holdfast run --pull-required`, told it needs the image "+
			"(PUT /required) as A's import exits, pulls it from A's spegel through its own (two nodes, two containerds and two spegels in a network namespace, "+
			"started afresh each round); beside `holdfast import` of the same archive on a fresh node B\n")
	}
	if findStat(r.Stats, ScenarioDisk, MethodDisk1) != nil {
		fmt.Fprintf(&b, "- disk: %s written durably, 1 and 4 streams, each round\n", formatBytes(set.DiskBytes))
	}
	return b.String()
}

func formatsOf(archives []Archive) string {
	var fs []string
	seen := map[fixture.Format]bool{}
	for _, x := range archives {
		if !seen[x.Format] {
			seen[x.Format] = true
			fs = append(fs, formatName(x.Format))
		}
	}
	return strings.Join(fs, ", ")
}

func formatName(f fixture.Format) string {
	switch f {
	case fixture.FormatDockerSave:
		return "docker save < 25"
	case fixture.FormatHybrid:
		return "docker save ≥ 25"
	case fixture.FormatOCI:
		return "OCI layout tar"
	}
	return string(f)
}

// writeTable writes a Markdown table with aligned columns.
func writeTable(b *strings.Builder, header []string, rows [][]string) {
	width := make([]int, len(header))
	for _, row := range append([][]string{header}, rows...) {
		for i, c := range row {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	cell := func(i int, c string) string { return c + strings.Repeat(" ", width[i]-len([]rune(c))) }
	writeRow := func(row []string) {
		b.WriteString("|")
		for i, c := range row {
			b.WriteString(" " + cell(i, c) + " |")
		}
		b.WriteString("\n")
	}
	writeRow(header)
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = strings.Repeat("-", width[i])
	}
	writeRow(sep)
	for _, row := range rows {
		writeRow(row)
	}
}

// WriteJSON writes the results to path atomically (a temp file beside it,
// renamed), creating the directory.
func WriteJSON(path string, r *Results) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the results: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return fixture.WriteFileAtomic(path, func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}

// formatSeconds prints a duration in seconds as ms or s, three digits.
func formatSeconds(s float64) string {
	switch {
	case math.IsNaN(s):
		return "–"
	case s < 1:
		return fmtNum(s*1000) + " ms"
	}
	return fmtNum(s) + " s"
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmtNum(float64(n)/(1<<30)) + " GiB"
	case n >= 1<<20:
		return fmtNum(float64(n)/(1<<20)) + " MiB"
	case n >= 1<<10:
		return fmtNum(float64(n)/(1<<10)) + " KiB"
	}
	return fmt.Sprintf("%d B", n)
}

func firstLineOf(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// Elapsed is how long the run took.
func (r *Results) Elapsed() time.Duration { return time.Duration(r.Seconds * float64(time.Second)) }

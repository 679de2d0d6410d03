package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// P10's methods: the large archive's image exported from a containerd that
// holds it, by holdfast export and by ctr piped through the zstd CLI.
const (
	MethodExport        = "holdfast export"
	MethodCtrExportZstd = "ctr images export --local, through zstd -T0 -3"
)

// P10's targets: holdfast export within 1.5× of ctr piped through zstd on
// the same machine, in at most 128 MiB.
const (
	p10LimitVsCtr = 1.5
	p10LimitRSS   = 128 // MiB
)

// lookZstd is the path of the zstd CLI, or an error that says what P10
// needs it for.
func lookZstd() (string, error) {
	p, err := exec.LookPath("zstd")
	if err != nil {
		return "", errors.New("P10: zstd is not on PATH: it compresses what ctr images export writes (Debian's zstd package; make deps installs it)")
	}
	return p, nil
}

// p10CtrScript is the shell pipeline P10 compares holdfast export with:
// ctr's export of names to standard output (--local: the transfer service
// writes its progress there too) through zstd on every core at level 3,
// into out, which is then synced as holdfast export syncs its file.
// pipefail: a failed ctr fails the row.
func p10CtrScript(ctr, zstd, address, out string, names []string) string {
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	var b strings.Builder
	b.WriteString("set -eo pipefail; ")
	b.WriteString(q(ctr) + " -a " + q(address) + " -n " + Namespace + " images export --local -")
	for _, n := range names {
		b.WriteString(" " + q(n))
	}
	b.WriteString(" | " + q(zstd) + " -T0 -3 -q -o " + q(out) + "; sync " + q(out))
	return b.String()
}

// p10 measures, alternating round by round, the export of the large
// archive's image from one containerd that holds it (imported once, with
// holdfast import, before the rounds): holdfast export to a .tar.zst
// (seekable zstd, written durably), and ctr images export piped through
// zstd -T0 -3 into a file, synced. Each writes into the measurement's own
// directory, removed after it.
func (h *harness) p10(ctx context.Context) (err error) {
	zstd, err := lookZstd()
	if err != nil {
		return err
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		return fmt.Errorf("P10: bash is not on PATH: it runs the ctr | zstd pipeline")
	}
	a := h.arch.Large
	return h.withImported(ctx, "P10", a, "", func(_, data string, st *store) error {
		ms := []coldMethod{
			{scenario: ScenarioP10, method: MethodExport, shared: st, names: a.Names, bytes: a.Bytes,
				run: func(ctx context.Context, env coldEnv) (procRun, error) {
					out := filepath.Join(env.dir, "export.tar.zst")
					r, err := runProc(ctx, filepath.Join(env.dir, "export"), h.cfg.Tools.Holdfast, p9ExportArgs(st.Address(), data, out, a.Names)...)
					if err == nil {
						err = nonEmpty(out)
					}
					return r, err
				}},
			{scenario: ScenarioP10, method: MethodCtrExportZstd, shared: st, names: a.Names, bytes: a.Bytes,
				run: func(ctx context.Context, env coldEnv) (procRun, error) {
					out := filepath.Join(env.dir, "ctr.tar.zst")
					r, err := runProc(ctx, filepath.Join(env.dir, "ctr"), bash, "-c", p10CtrScript(h.cfg.Tools.Ctr, zstd, st.Address(), out, a.Names))
					if err == nil {
						err = nonEmpty(out)
					}
					// The peak is bash's own, not the pipeline's: not reported.
					r.MaxRSS = 0
					return r, err
				}},
		}
		return h.alternate(ctx, ms, h.cfg.Rounds)
	})
}

// nonEmpty checks that an export wrote something at path.
func nonEmpty(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Size() == 0 {
		return fmt.Errorf("%s is empty", path)
	}
	return nil
}

// p10Targets evaluates P10's targets: holdfast export ÷ ctr | zstd ≤ 1.5×,
// and holdfast export's peak RSS ≤ 128 MiB. Left out when P10 did not run.
func p10Targets(stats []Stat) []Outcome {
	ex := findStat(stats, ScenarioP10, MethodExport)
	if ex == nil {
		return nil
	}
	median := func(s *Stat) float64 {
		if s == nil || s.N == 0 {
			return math.NaN()
		}
		return float64(s.Median)
	}
	rss := math.NaN()
	if ex.N > 0 {
		rss = float64(ex.MaxRSSBytes) / (1 << 20)
	}
	return []Outcome{
		Target{ID: "P10 export vs ctr + zstd", What: "holdfast export of the large image ÷ ctr images export --local through zstd -T0 -3", Op: AtMost, Limit: p10LimitVsCtr, Unit: "×"}.
			Evaluate(Ratio(median(ex), median(findStat(stats, ScenarioP10, MethodCtrExportZstd)))),
		Target{ID: "P10 export RSS", What: "peak RSS of holdfast export of the large image", Op: AtMost, Limit: p10LimitRSS, Unit: "MiB"}.Evaluate(rss),
	}
}

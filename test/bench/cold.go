package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// coldMethod is one contender of a cold-import scenario. Each measurement
// gets a fresh containerd on a new data dir (unless it needs none): the
// embedded one, or Debian's 1.6 with on16.
type coldMethod struct {
	scenario, method string
	containerd       bool     // needs a fresh containerd
	shared           *store   // ... or runs on this one, which stays up for its group
	on16             bool     // ... Debian's containerd 1.6, not the embedded one
	coldCache        bool     // drop the page cache before it (always, not only with -drop-caches)
	bytes            int64    // what it imports or writes, for the per-GiB and MB/s figures
	names            []string // the records the import must leave
	pinned           bool     // ... pinned by holdfast
	run              func(ctx context.Context, env coldEnv) (procRun, error)
}

// coldEnv is where one measurement runs.
type coldEnv struct {
	dir string // the measurement's own directory
	st  *store // nil when the method needs no containerd
}

// cold measures every cold-import scenario, alternating the contenders: in
// each round every method of every scenario runs once, in the same order.
func (h *harness) cold(ctx context.Context) error {
	return h.alternate(ctx, h.coldMethods(), h.cfg.Rounds)
}

// alternate runs every method once per round, in the same order.
func (h *harness) alternate(ctx context.Context, ms []coldMethod, rounds int) error {
	for round := 1; round <= rounds && len(ms) > 0; round++ {
		for _, m := range ms {
			s, err := h.measureCold(ctx, m, round)
			if err != nil {
				return err
			}
			h.record(s)
		}
	}
	return nil
}

func (h *harness) coldMethods() []coldMethod {
	a := h.arch
	var ms []coldMethod
	if h.cfg.runs("P1") {
		large := a.GroupDir("large")
		ms = append(ms,
			h.holdfastSync(ScenarioP1, MethodHoldfastDirect, WriteDirect, large, a.Large),
			h.holdfastSync(ScenarioP1, MethodHoldfastStream, WriteStream, large, a.Large),
			h.ctrImport(ScenarioP1, MethodCtr, false, a.Large),
			h.ctrImport(ScenarioP1, MethodCtrLocal, true, a.Large),
			h.floor(ScenarioP1, MethodFloor, a.Large),
			h.holdfastSync(ScenarioP1, MethodHoldfastZstDirect, WriteDirect, a.GroupDir("large-zst"), a.LargeZst),
			h.holdfastSync(ScenarioP1, MethodHoldfastZstStream, WriteStream, a.GroupDir("large-zst"), a.LargeZst),
			h.zstdFloor(ScenarioP1, MethodZstdFloor, a.LargeZst),
		)
		cc := h.holdfastSync(ScenarioP1, MethodHoldfastColdCache, WriteDirect, large, a.Large)
		cc.coldCache = true
		fc := h.floor(ScenarioP1, MethodFloorColdCache, a.Large)
		fc.coldCache = true
		ms = append(ms, cc, fc)
		if why := check16(h.containerd16()); why != "" {
			h.logf("skipping the P1 rows on containerd 1.6: %s", why)
		} else {
			for _, m := range []coldMethod{
				h.holdfastSync(ScenarioP1, Method16Stream, WriteStream, large, a.Large),
				h.holdfastSync(ScenarioP1, Method16Direct, WriteDirect, large, a.Large),
				h.ctrImport(ScenarioP1, Method16CtrLocal, true, a.Large),
			} {
				m.on16 = true
				ms = append(ms, m)
			}
		}
	}
	if h.cfg.runs("P1") || h.cfg.runs("disk") {
		ms = append(ms, h.diskRate(MethodDisk1, 1), h.diskRate(MethodDisk4, 4))
	}
	if h.cfg.runs("P1s") {
		small := a.GroupDir("small")
		ms = append(ms,
			h.holdfastSync(ScenarioP1Small, MethodHoldfastDirect, WriteDirect, small, a.Small),
			h.holdfastSync(ScenarioP1Small, MethodHoldfastStream, WriteStream, small, a.Small),
			h.ctrImport(ScenarioP1Small, MethodCtr, false, a.Small),
			h.ctrImport(ScenarioP1Small, MethodCtrLocal, true, a.Small),
			h.floor(ScenarioP1Small, MethodFloor, a.Small),
		)
	}
	if h.cfg.runs("P2") {
		medium := a.GroupDir("medium")
		ms = append(ms,
			h.holdfastSync(ScenarioP2, MethodHoldfastDirect, WriteDirect, medium, a.Medium...),
			h.holdfastSync(ScenarioP2, MethodHoldfastStream, WriteStream, medium, a.Medium...),
			h.ctrImport(ScenarioP2, MethodCtr, false, a.Medium...),
			h.ctrImport(ScenarioP2, MethodCtrLocal, true, a.Medium...),
		)
	}
	return ms
}

// containerd16 is the containerd 1.6 binary to measure on.
func (h *harness) containerd16() string {
	if h.cfg.Containerd16 != "" {
		return h.cfg.Containerd16
	}
	return DefaultContainerd16
}

// archiveBytes is the size on disk of archives.
func archiveBytes(archives []Archive) int64 {
	var n int64
	for _, a := range archives {
		n += a.Bytes
	}
	return n
}

// holdfastSync is one `holdfast sync --write-path=path` of an images dir
// holding archives.
func (h *harness) holdfastSync(scenario, method, path, imagesDir string, archives ...Archive) coldMethod {
	return coldMethod{
		scenario: scenario, method: method, containerd: true, names: Names(archives...), pinned: true, bytes: archiveBytes(archives),
		run: func(ctx context.Context, env coldEnv) (procRun, error) {
			return h.runSync(ctx, env.st, path, filepath.Join(env.dir, "holdfast"), imagesDir, filepath.Join(env.dir, "sync"))
		},
	}
}

// syncArgs is the command line of a holdfast sync: the write path always
// named, so the row does not depend on holdfast's default.
func syncArgs(address, path, dataDir, imagesDir string) []string {
	return []string{"sync", "--address", address, "--write-path", path, "--data-dir", dataDir, "--images", imagesDir}
}

// runSync runs `holdfast sync --write-path=path` against st with its own
// data dir and checks that it succeeded.
func (h *harness) runSync(ctx context.Context, st *store, path, dataDir, imagesDir, logBase string) (procRun, error) {
	r, err := runProc(ctx, logBase, h.cfg.Tools.Holdfast, syncArgs(st.Address(), path, dataDir, imagesDir)...)
	if err != nil {
		return r, err
	}
	if _, err := parseSummary(r.Stdout); err != nil {
		return r, err
	}
	return r, nil
}

// ctrImport imports archives with ctr one after another, through the
// transfer service or with --local (client.Import: what K3s does).
func (h *harness) ctrImport(scenario, method string, local bool, archives ...Archive) coldMethod {
	return coldMethod{
		scenario: scenario, method: method, containerd: true, names: Names(archives...), bytes: archiveBytes(archives),
		run: func(ctx context.Context, env coldEnv) (procRun, error) {
			return h.runCtrImports(ctx, env.st, filepath.Join(env.dir, "ctr"), local, archives)
		},
	}
}

// runCtrImports runs `ctr images import --no-unpack [--local]` for each
// archive in turn; the wall time is the whole sequence, the CPU time the sum,
// the RSS the largest.
func (h *harness) runCtrImports(ctx context.Context, st *store, logBase string, local bool, archives []Archive) (procRun, error) {
	var total procRun
	start := time.Now()
	for i, a := range archives {
		args := []string{"-a", st.Address(), "-n", Namespace, "images", "import", "--no-unpack"}
		if local {
			args = append(args, "--local")
		}
		r, err := runProc(ctx, fmt.Sprintf("%s-%d", logBase, i), h.cfg.Tools.Ctr, append(args, a.Path)...)
		total.CPU += r.CPU
		total.MaxRSS = max(total.MaxRSS, r.MaxRSS)
		if err != nil {
			return total, fmt.Errorf("importing %s with ctr: %w", a.Path, err)
		}
	}
	total.Wall = time.Since(start)
	return total, nil
}

// floor runs WriteFloor on the archive, in the harness process.
func (h *harness) floor(scenario, method string, a Archive) coldMethod {
	return coldMethod{
		scenario: scenario, method: method, bytes: a.Bytes,
		run: func(ctx context.Context, env coldEnv) (procRun, error) {
			var r procRun
			cpu0 := selfCPU()
			start := time.Now()
			res, err := WriteFloor(ctx, a.Path, filepath.Join(env.dir, "floor"))
			r.Wall = time.Since(start)
			r.CPU = selfCPU() - cpu0
			if err == nil && res.Blobs == 0 {
				err = fmt.Errorf("writing the floor of %s: no blobs in it", a.Path)
			}
			return r, err
		},
	}
}

// zstdFloor runs DecodeFloor on the compressed archive, in the harness
// process.
func (h *harness) zstdFloor(scenario, method string, a Archive) coldMethod {
	return coldMethod{
		scenario: scenario, method: method, bytes: a.Bytes,
		run: func(ctx context.Context, _ coldEnv) (procRun, error) {
			var r procRun
			cpu0 := selfCPU()
			start := time.Now()
			_, err := DecodeFloor(ctx, a.Path)
			r.Wall = time.Since(start)
			r.CPU = selfCPU() - cpu0
			return r, err
		},
	}
}

// selfCPU is the CPU time the harness process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measureCold runs one measurement of m in a new directory, on a fresh
// containerd when m needs one, and removes both afterwards. The error is
// only for what stops the harness (ctx); a failed import is in the sample.
func (h *harness) measureCold(ctx context.Context, m coldMethod, round int) (s Sample, err error) {
	s = Sample{Scenario: m.scenario, Method: m.method, Round: round}
	dir, err := h.newRunDir()
	if err != nil {
		return s, err
	}
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing %s: %w", dir, rerr))
		}
	}()
	if err := h.quiesceDrop(m.coldCache); err != nil {
		return s, err
	}
	env := coldEnv{dir: dir, st: m.shared}
	if m.containerd {
		var st *store
		var err error
		if m.on16 {
			st, err = startStore16(ctx, filepath.Join(dir, "containerd"), h.containerd16())
		} else {
			st, err = startStore(ctx, filepath.Join(dir, "containerd"), h.cfg.Tools.Holdfast)
		}
		if err != nil {
			if ctx.Err() != nil {
				return s, ctx.Err()
			}
			return s, fmt.Errorf("starting containerd for %s / %s: %w", m.scenario, m.method, err)
		}
		defer func() {
			if serr := st.stop(ctx); serr != nil {
				err = errors.Join(err, serr)
			}
		}()
		h.noteVersion(ctx, st)
		env.st = st
	}
	meter := startMeter(env.st)
	r, runErr := m.run(ctx, env)
	if ctx.Err() != nil {
		return s, ctx.Err()
	}
	if m.coldCache && !h.cfg.DropCaches {
		// The drop evicted every archive: read them back, so that the
		// measurements after this one find them cached, as they are
		// meant to (only the cold-cache rows read from the disk).
		defer func() { err = errors.Join(err, h.rewarm()) }()
	}
	s.Seconds = r.Wall.Seconds()
	s.ClientCPUSeconds = r.CPU.Seconds()
	s.MaxRSSBytes = r.MaxRSS
	s.Bytes = m.bytes
	s.Summary = summaryLine(r.Stdout)
	child := r.CPU
	if !m.containerd && m.shared == nil {
		child = 0 // the floor runs in the harness: its CPU is the harness's
	}
	meter.finish(&s, child)
	if env.st != nil {
		if runErr == nil {
			runErr = env.st.checkImages(ctx, m.names, m.pinned)
		}
	}
	if runErr != nil {
		s.Error = runErr.Error()
	}
	return s, nil
}

// syncSummary is the counts of holdfast sync's summary line.
type syncSummary struct {
	Imported, Unchanged, Healed, Unpinned, Failed int
	Duration                                      time.Duration // its own "read in" time
}

// summaryLine is the "sync: ..." line of holdfast sync's output, or "".
func summaryLine(stdout string) string {
	for _, line := range strings.Split(stdout, "\n") {
		if strings.HasPrefix(line, "sync: ") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// parseSummary reads holdfast sync's summary line.
func parseSummary(stdout string) (syncSummary, error) {
	var s syncSummary
	line := summaryLine(stdout)
	re := regexp.MustCompile(`^sync: (\d+) imported, (\d+) unchanged, (\d+) healed, (\d+) unpinned, (\d+) failed;.* read in (\S+)$`)
	m := re.FindStringSubmatch(line)
	if m == nil {
		return s, fmt.Errorf("holdfast sync printed no summary line I can read: %q", strings.TrimSpace(stdout))
	}
	counts := []*int{&s.Imported, &s.Unchanged, &s.Healed, &s.Unpinned, &s.Failed}
	for i, p := range counts {
		*p, _ = strconv.Atoi(m[i+1])
	}
	d, err := time.ParseDuration(m[6])
	if err != nil {
		return s, fmt.Errorf("holdfast sync's summary line %q: %w", line, err)
	}
	s.Duration = d
	if s.Failed > 0 {
		return s, fmt.Errorf("holdfast sync failed on %d sources: %s", s.Failed, line)
	}
	return s, nil
}

// rewarm reads every archive once, uncounted, to put it back in the page
// cache after a cold-cache row dropped it.
func (h *harness) rewarm() error {
	for _, a := range h.arch.All() {
		f, err := os.Open(a.Path)
		if err != nil {
			return fmt.Errorf("reading %s back into the page cache: %w", a.Path, err)
		}
		_, err = io.Copy(io.Discard, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("reading %s back into the page cache: %w", a.Path, err)
		}
	}
	return nil
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Scenarios, as the benchmarks doc numbers them. P6 is measured within P1.
const (
	ScenarioP1      = "P1"       // cold import of the large archive
	ScenarioP1Small = "P1s"      // cold import of the archive of many small layers
	ScenarioP2      = "P2"       // cold import of the medium archives together
	ScenarioP3      = "P3"       // warm sync of the warm archives
	ScenarioHeal    = "P4 heal"  // heal latency under holdfast run
	ScenarioWatch   = "P4 watch" // watch-to-pinned latency under holdfast run
	ScenarioP5      = "P5"       // peak RSS of a cold import of the huge archive
	ScenarioP7      = "P7"       // cold import of a Hauler haul and of a .tar.zst of the same images
	ScenarioP8      = "P8"       // the large archive imported on node A, until pinned on node B through the peers
	ScenarioP9      = "P9"       // cold import of the large archive's image as .tar, one zstd frame, pzstd's frames and holdfast export's
	ScenarioP10     = "P10"      // export of the large archive's image: holdfast export, ctr export through zstd
	ScenarioDisk    = "disk"     // the disk's own durable write rate (measured with P1)
	// P11's scenarios are "P11 N=<nodes>" (p11.go): one image staged on N
	// simulated nodes.
)

// Groups lists the scenario groups Config.Only selects from (P6 and the disk
// rate are part of P1; "disk" alone runs only the disk rate).
func Groups() []string {
	return []string{"P1", "P1s", "P2", "P3", "P4", "P5", "P7", "P8", "P9", "P10", "P11", "disk"}
}

// Write paths of holdfast sync (--write-path); every holdfast invocation of
// the harness names one, so a row means the same whatever the default is.
const (
	WriteDirect = "direct" // blob files written into the content store's directory, committed by metadata
	WriteStream = "stream" // blobs sent through containerd's content API
)

// Methods: what is measured in a scenario.
const (
	MethodHoldfastDirect    = "holdfast sync (direct)"
	MethodHoldfastStream    = "holdfast sync (stream)"
	MethodHoldfastZstDirect = "holdfast sync .tar.zst (direct)"
	MethodHoldfastZstStream = "holdfast sync .tar.zst (stream)"
	MethodHoldfastHaul      = "holdfast sync haul.tar.zst (direct)"
	MethodHoldfastColdCache = "holdfast sync (direct, cold cache)"
	MethodCtr               = "ctr import"
	MethodCtrLocal          = "ctr import --local"
	MethodFloor             = "floor"
	MethodFloorColdCache    = "floor (cold cache)"
	MethodZstdFloor         = "zstd decode floor"
	Method16Stream          = "holdfast sync (stream) on containerd 1.6"
	Method16Direct          = "holdfast sync (direct) on containerd 1.6"
	Method16CtrLocal        = "ctr import --local on containerd 1.6"
	MethodDisk1             = "durable write, 1 stream"
	MethodDisk4             = "durable write, 4 streams"
	MethodHoldfastSetup     = "holdfast sync (direct, cold, setup)"
	MethodHoldfastWarm      = "holdfast sync (warm)"
	MethodHoldfastNoCache   = "holdfast sync (warm, new data dir)"
	MethodProcessStart      = "holdfast version (process start only)"
	MethodAgent             = "holdfast run"
	MethodPeer              = "holdfast import on A → pinned on B (peers)"
	MethodImportOnB         = "holdfast import on B"
)

// Config is one run of the harness.
type Config struct {
	Tools      Tools
	Set        Set
	Rounds     int
	ZstdWindow int      // of the .tar.zst: a power of two
	WorkDir    string   // where the harness makes its work dir; "" = os.TempDir()
	Keep       bool     // keep the work dir
	DropCaches bool     // drop the page cache before each measurement (the cold-cache rows always do)
	Only       []string // scenario groups to run (Groups); empty = all
	// Containerd16 is Debian's containerd 1.6, P1's second target; ""
	// is DefaultContainerd16. When it is missing those rows are skipped.
	Containerd16 string
	// ProfileDir, when set, gets containerd's CPU profile of one more
	// (uncounted) holdfast sync of the large archive, after P1.
	ProfileDir string
	P11        P11Config // P11's nodes, links and image
	Command    string    // the command line, for the record
	Progress   io.Writer
}

func (c Config) runs(group string) bool { return len(c.Only) == 0 || slices.Contains(c.Only, group) }

// Validate checks the config.
func (c Config) Validate() error {
	if c.Tools.Holdfast == "" || c.Tools.Ctr == "" {
		return errors.New("the paths of holdfast and ctr are required")
	}
	if c.Rounds < 1 {
		return fmt.Errorf("rounds is %d: want at least 1", c.Rounds)
	}
	if c.ZstdWindow < 1<<10 || c.ZstdWindow > 512<<20 || bits.OnesCount(uint(c.ZstdWindow)) != 1 {
		return fmt.Errorf("zstd window %d: want a power of two from 1 KiB to 512 MiB", c.ZstdWindow)
	}
	for _, g := range c.Only {
		if !slices.Contains(Groups(), g) {
			return fmt.Errorf("unknown scenario %q (want some of %v)", g, Groups())
		}
	}
	if err := c.P11.Validate(); err != nil {
		return err
	}
	if c.Set.DiskBytes < 4*mib || c.Set.DiskBytes%(4*mib) != 0 {
		return fmt.Errorf("archive set %s: the disk rate's size %d is not a multiple of 4 MiB", c.Set.Name, c.Set.DiskBytes)
	}
	for _, s := range []Shape{c.Set.Large, c.Set.Small, c.Set.Medium, c.Set.Warm, c.Set.Heal, c.Set.Watch, c.Set.Huge} {
		if s.Count < 1 || s.Layers < 1 || s.LayerSize < 1 || len(s.Formats) == 0 {
			return fmt.Errorf("archive set %s: every shape needs a count, layers, a layer size and a format", c.Set.Name)
		}
	}
	return nil
}

// Sample is one measurement.
type Sample struct {
	Scenario string  `json:"scenario"`
	Method   string  `json:"method"`
	Round    int     `json:"round"`   // 1-based; for P4, the iteration
	Seconds  float64 `json:"seconds"` // wall time, or latency for P4
	// ClientCPUSeconds is the CPU time of the importing process(es): holdfast
	// or ctr (from their rusage), or the harness itself for the floor.
	ClientCPUSeconds float64 `json:"client_cpu_seconds,omitempty"`
	// ContainerdCPUSeconds is the CPU time containerd used meanwhile.
	ContainerdCPUSeconds float64 `json:"containerd_cpu_seconds,omitempty"`
	// OtherCPUSeconds is the CPU time the rest of the machine used meanwhile:
	// other work on a shared machine, and kernel threads (cpuMeter).
	OtherCPUSeconds float64 `json:"other_cpu_seconds,omitempty"`
	MaxRSSBytes     int64   `json:"max_rss_bytes,omitempty"` // of the importing process
	// Bytes is what the sample imported (the archives' size on disk) or,
	// for the disk rate, wrote.
	Bytes         int64   `json:"bytes,omitempty"`
	DeleteSeconds float64 `json:"delete_seconds,omitempty"`
	// ImportSeconds is, for P8's peer method, the part of Seconds until
	// node A's import exited; the rest is node B's pull through the peers
	// and its pin.
	ImportSeconds float64 `json:"import_seconds,omitempty"`
	// Served is, for P11, the bytes each node sent meanwhile, node 1 first.
	Served  []int64 `json:"served_bytes,omitempty"`
	Summary string  `json:"summary,omitempty"` // holdfast sync's summary line
	Error   string  `json:"error,omitempty"`
}

// Results is everything a run measured.
type Results struct {
	Started  time.Time  `json:"started"`
	Seconds  float64    `json:"seconds"`
	Command  string     `json:"command"`
	Machine  Machine    `json:"machine"`
	Config   ConfigJSON `json:"config"`
	Archives *Archives  `json:"archives"`
	Samples  []Sample   `json:"samples"`
	Stats    []Stat     `json:"stats"`
	Targets  []Outcome  `json:"targets"`
}

// ConfigJSON is the part of Config that describes the measurement.
type ConfigJSON struct {
	Set        Set       `json:"set"`
	Rounds     int       `json:"rounds"`
	ZstdWindow int       `json:"zstd_window"`
	ZstdLevel  string    `json:"zstd_level"`
	DropCaches bool      `json:"drop_caches"`
	Only       []string  `json:"only,omitempty"`
	Namespace  string    `json:"namespace"`
	Tools      Tools     `json:"tools"`
	P11        P11Config `json:"p11,omitzero"`
}

// Failed counts the samples that failed.
func (r *Results) Failed() int {
	n := 0
	for _, s := range r.Samples {
		if s.Error != "" {
			n++
		}
	}
	return n
}

// harness is one run in progress.
type harness struct {
	cfg     Config
	work    string
	arch    *Archives
	res     *Results
	runs    int // run directories made so far
	start   time.Time
	version string // containerd's, once a store answered
}

// Run generates the archives, measures every scenario and returns the
// results. Samples that fail are recorded with their error and the run goes
// on; Run returns an error only when it cannot go on (or ctx is cancelled),
// with whatever it measured so far.
func Run(ctx context.Context, cfg Config) (res *Results, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	h := &harness{cfg: cfg, start: time.Now()}
	h.res = &Results{
		Started: h.start.UTC(),
		Command: cfg.Command,
		Config: ConfigJSON{Set: cfg.Set, Rounds: cfg.Rounds, ZstdWindow: cfg.ZstdWindow, ZstdLevel: "klauspost/compress default (≈ zstd -3)",
			DropCaches: cfg.DropCaches, Only: cfg.Only, Namespace: Namespace, Tools: cfg.Tools},
	}
	parent := cfg.WorkDir
	if parent == "" {
		parent = os.TempDir()
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("creating the work dir: %w", err)
	}
	// Short: containerd's socket paths under it must stay within 104 bytes.
	h.work, err = os.MkdirTemp(parent, "hfb-")
	if err != nil {
		return nil, fmt.Errorf("creating the work dir: %w", err)
	}
	defer func() {
		if cfg.Keep {
			h.logf("kept the work dir %s", h.work)
			return
		}
		if rerr := os.RemoveAll(h.work); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing the work dir: %w", rerr))
		}
	}()
	h.res.Machine = describeMachine(ctx, h.work, cfg.Tools)
	h.logf("work dir %s (%s); archive set %q, %d rounds", h.work, h.res.Machine.Filesystem, cfg.Set.Name, cfg.Rounds)

	h.arch, err = Generate(ctx, filepath.Join(h.work, "archives"), cfg.Set, cfg.ZstdWindow, func(a Archive) {
		h.logf("generated %s (%s, %s)", filepath.Base(a.Path), a.Format, formatBytes(a.Bytes))
	})
	if err != nil {
		return h.finish(), err
	}
	h.res.Archives = h.arch

	if err := h.cold(ctx); err != nil {
		return h.finish(), err
	}
	if cfg.ProfileDir != "" && cfg.runs("P1") {
		if err := h.profile(ctx, cfg.ProfileDir); err != nil {
			if ctx.Err() != nil {
				return h.finish(), ctx.Err()
			}
			h.logf("no profile: %v", err)
		}
	}
	if cfg.runs("P3") {
		if err := h.warm(ctx); err != nil {
			return h.finish(), err
		}
	}
	if cfg.runs("P4") {
		if err := h.agent(ctx); err != nil {
			return h.finish(), err
		}
	}
	if cfg.runs("P5") {
		if err := h.p5(ctx); err != nil {
			return h.finish(), err
		}
	}
	if cfg.runs("P7") {
		if err := h.p7(ctx); err != nil {
			return h.finish(), err
		}
	}
	if cfg.runs("P8") {
		if err := h.p8(ctx); err != nil {
			return h.finish(), err
		}
	}
	if cfg.runs("P9") {
		if err := h.p9(ctx); err != nil {
			return h.finish(), err
		}
	}
	if cfg.runs("P10") {
		if err := h.p10(ctx); err != nil {
			return h.finish(), err
		}
	}
	if cfg.runs("P11") {
		if err := h.p11(ctx); err != nil {
			return h.finish(), err
		}
	}
	return h.finish(), nil
}

// finish computes the statistics and targets of what was measured.
func (h *harness) finish() *Results {
	h.res.Seconds = time.Since(h.start).Seconds()
	h.res.Machine.LoadAvgEnd = loadAvg()
	h.res.Machine.ContainerdVersion = h.version
	h.res.Stats = computeStats(h.res.Samples)
	h.res.Targets = append(append(evaluateTargets(h.res.Stats), p9Targets(h.res.Stats)...), p10Targets(h.res.Stats)...)
	return h.res
}

func (h *harness) logf(format string, args ...any) {
	el := time.Since(h.start).Round(time.Second)
	fmt.Fprintf(h.cfg.Progress, "[%6s] %s\n", el, fmt.Sprintf(format, args...))
}

// record adds a sample and reports it.
func (h *harness) record(s Sample) {
	h.res.Samples = append(h.res.Samples, s)
	what := fmt.Sprintf("%s / %s #%d", s.Scenario, s.Method, s.Round)
	if s.Error != "" {
		h.logf("%s: FAILED: %s", what, s.Error)
		return
	}
	extra := ""
	if s.MaxRSSBytes > 0 {
		extra = fmt.Sprintf(", max RSS %s", formatBytes(s.MaxRSSBytes))
	}
	h.logf("%s: %s%s", what, formatSeconds(s.Seconds), extra)
}

// newRunDir makes a new empty directory for one measurement.
func (h *harness) newRunDir() (string, error) {
	h.runs++
	dir := filepath.Join(h.work, "r", strconv.Itoa(h.runs))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", dir, err)
	}
	return dir, nil
}

// quiesce flushes dirty pages (the previous measurement's writes, the
// generator's) so they are not written back during the next measurement,
// and drops the page cache when asked to.
func (h *harness) quiesce() error { return h.quiesceDrop(false) }

// quiesceDrop is quiesce that drops the page cache also when drop is set
// (a cold-cache row), whatever -drop-caches says.
func (h *harness) quiesceDrop(drop bool) error {
	unix.Sync()
	if !h.cfg.DropCaches && !drop {
		return nil
	}
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200); err != nil {
		return fmt.Errorf("dropping the page cache: %w", err)
	}
	return nil
}

// noteVersion remembers containerd's version from the first store that answers.
func (h *harness) noteVersion(ctx context.Context, st *store) {
	if h.version != "" {
		return
	}
	if v, err := st.client.Version(ctx); err == nil {
		h.version = v.Version
	}
}

package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/holdfast-project/holdfast/internal/archive"
	"github.com/holdfast-project/holdfast/internal/fixture"
)

// P9's files: the large archive's image four ways. Each is alone in a
// directory of its own (an images dir for holdfast sync).
const (
	p9Tar    = "tar"       // the large archive, a plain tar (Archives.Large)
	p9One    = "one frame" // the same as .tar.zst, one zstd frame (Archives.LargeZst)
	p9Pzstd  = "pzstd"     // the plain tar through pzstd -p 2 -3: many frames
	p9Export = "export"    // holdfast export of the image: seekable zstd, many frames
)

// p9Files are P9's files in the order each round measures them.
var p9Files = []string{p9Tar, p9One, p9Pzstd, p9Export}

// p9MultiFrame are the files of many zstd frames.
var p9MultiFrame = []string{p9Pzstd, p9Export}

// P9's CPU sets: holdfast unrestricted, then on CPU 0 only and on CPUs 0
// and 1 (taskset -c around holdfast; containerd is never restricted).
const (
	p9AllCPUs = ""
	p9OneCPU  = "0"
	p9TwoCPUs = "0,1"
)

var p9CPUSets = []string{p9AllCPUs, p9OneCPU, p9TwoCPUs}

// p9Workers are the worker counts the multi-frame files are decoded with
// alone, beside the default (0).
var p9Workers = []int{1, 2}

// P9's targets: a multi-frame .tar.zst imports no slower than the same bytes
// as one frame and within 1.4× of the plain tar; decoding it alone, two
// workers take at most 0.6× the time of one.
const (
	p9LimitVsOneFrame = 1.0
	p9LimitVsTar      = 1.4
	p9LimitScaling    = 0.6
)

// p9ImportMethod is the method name of holdfast sync of file on the CPU set
// cpus. The plain tar, unrestricted, is the scenario's baseline,
// MethodHoldfastDirect, which the report's "÷ holdfast" column divides by.
func p9ImportMethod(file, cpus string) string {
	if file == p9Tar && cpus == p9AllCPUs {
		return MethodHoldfastDirect
	}
	on := ""
	if cpus != p9AllCPUs {
		on = ", taskset -c " + cpus
	}
	return "holdfast sync" + p9FileWords(file) + " (direct" + on + ")"
}

// p9FloorMethod is the method name of the decode floor of file: the file
// decoded to nothing in the harness with the default workers.
func p9FloorMethod(file string) string {
	if file == p9Tar {
		return "decode floor .tar (not compressed: read only)"
	}
	return "decode floor" + p9FileWords(file)
}

// p9DecodeMethod is the method name of file decoded alone with workers
// goroutines.
func p9DecodeMethod(file string, workers int) string {
	w := "workers"
	if workers == 1 {
		w = "worker"
	}
	return fmt.Sprintf("zstd decode%s, %d %s", p9FileWords(file), workers, w)
}

// p9FileWords names a file in a method name, with a leading space ("" for
// the plain tar, which the other scenarios' rows name so).
func p9FileWords(file string) string {
	switch file {
	case p9One:
		return " .tar.zst one frame"
	case p9Pzstd:
		return " .tar.zst pzstd"
	case p9Export:
		return " export .tar.zst"
	}
	return ""
}

// p9Label names a file in P9's own tables.
func p9Label(file string) string {
	switch file {
	case p9Tar:
		return ".tar"
	case p9One:
		return ".tar.zst, one frame"
	case p9Pzstd:
		return ".tar.zst, pzstd -p 2 -3"
	case p9Export:
		return ".tar.zst, holdfast export"
	}
	return file
}

// p9CPULabel names a CPU set in P9's own tables.
func p9CPULabel(cpus string) string {
	switch cpus {
	case p9AllCPUs:
		return "all CPUs"
	case p9OneCPU:
		return "CPU 0"
	}
	return "CPUs " + cpus
}

// p9PzstdArgs is pzstd's command line: two threads, level 3, into out.
func p9PzstdArgs(in, out string) []string {
	return []string{"-p", "2", "-3", "-o", out, in}
}

// p9ExportArgs is the command line of holdfast export of names from the
// containerd at address into out.
func p9ExportArgs(address, dataDir, out string, names []string) []string {
	args := []string{"export", "--address", address, "--namespace", Namespace, "--data-dir", dataDir, "-o", out}
	return append(args, names...)
}

// p9SyncArgs is the command line of holdfast sync (direct) on the CPU set
// cpus: bin is taskset then, holdfast its first argument.
func p9SyncArgs(taskset, holdfast, cpus, address, dataDir, imagesDir string) (string, []string) {
	args := syncArgs(address, WriteDirect, dataDir, imagesDir)
	if cpus == p9AllCPUs {
		return holdfast, args
	}
	return taskset, append([]string{"-c", cpus, holdfast}, args...)
}

// lookPzstd is the path of pzstd, or an error that says what P9 needs it for.
func lookPzstd() (string, error) {
	p, err := exec.LookPath("pzstd")
	if err != nil {
		return "", errors.New("P9: pzstd is not on PATH: it writes P9's multi-frame .tar.zst (Debian's zstd package has it; make deps installs it)")
	}
	return p, nil
}

// p9Sets is which of p9CPUSets this machine can run, and why the others
// cannot: taskset must be on PATH and the harness's own CPUs must include
// the CPUs named.
func p9Sets() (sets []string, taskset string, skipped []string) {
	sets = []string{p9AllCPUs}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return sets, "", []string{"taskset is not on PATH: no rows with holdfast on 1 or 2 CPUs"}
	}
	var mask unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mask); err != nil {
		return sets, "", []string{fmt.Sprintf("reading the harness's CPUs: %v: no rows with holdfast on 1 or 2 CPUs", err)}
	}
	for _, cpus := range p9CPUSets[1:] {
		ok := true
		for _, c := range strings.Split(cpus, ",") {
			n, err := strconv.Atoi(c)
			ok = ok && err == nil && mask.IsSet(n)
		}
		if ok {
			sets = append(sets, cpus)
		} else {
			skipped = append(skipped, fmt.Sprintf("the harness may not run on CPUs %s: no rows with taskset -c %s", cpus, cpus))
		}
	}
	return sets, taskset, skipped
}

// p9 measures, alternating round by round, each on a fresh embedded
// containerd with the direct write path: holdfast sync of the large
// archive's image as a plain tar, as one zstd frame, as pzstd's frames and
// as holdfast export writes it; the same with holdfast on CPU 0 and on CPUs
// 0 and 1 (taskset); each file decoded to nothing in the harness (the
// decode floor, archive.DrainWorkers with its default workers); and the
// multi-frame files decoded with one and with two workers. The pzstd and
// export files are made first and deleted when the group is done.
func (h *harness) p9(ctx context.Context) (err error) {
	pzstd, err := lookPzstd()
	if err != nil {
		return err
	}
	dir := filepath.Join(h.work, "p9")
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing P9's archives: %w", rerr))
		}
	}()
	files, err := h.p9Prepare(ctx, dir, pzstd)
	if err != nil {
		return err
	}
	sets, taskset, skipped := p9Sets()
	for _, why := range skipped {
		h.logf("P9: %s", why)
	}
	var ms []coldMethod
	for _, cpus := range sets {
		for _, f := range p9Files {
			ms = append(ms, h.p9Sync(p9ImportMethod(f, cpus), taskset, cpus, files[f]))
		}
	}
	for _, f := range p9Files {
		ms = append(ms, h.p9Drain(p9FloorMethod(f), files[f], 0))
	}
	for _, f := range p9MultiFrame {
		for _, w := range p9Workers {
			ms = append(ms, h.p9Drain(p9DecodeMethod(f, w), files[f], w))
		}
	}
	return h.alternate(ctx, ms, h.cfg.Rounds)
}

// p9File is one of P9's files and what decoding it must give.
type p9File struct {
	Archive
	dir     string // its images dir
	decoded int64  // the bytes it decodes to; 0: not checked
}

// p9Prepare finds the plain tar and the one-frame .tar.zst among the
// generated archives and writes the pzstd and export files under dir.
func (h *harness) p9Prepare(ctx context.Context, dir, pzstd string) (map[string]p9File, error) {
	large, zst := h.arch.Large, h.arch.LargeZst
	files := map[string]p9File{
		p9Tar: {Archive: large, dir: filepath.Dir(large.Path), decoded: large.Bytes},
		p9One: {Archive: zst, dir: filepath.Dir(zst.Path), decoded: large.Bytes},
	}
	logs := filepath.Join(dir, "log")

	pz := p9File{Archive: large, dir: filepath.Join(dir, "pzstd"), decoded: large.Bytes}
	pz.Path = filepath.Join(pz.dir, strings.TrimSuffix(filepath.Base(large.Path), ".tar")+".tar.zst")
	pz.Compression, pz.ZstdWindow = fixture.Zstd, 0
	if err := os.MkdirAll(pz.dir, 0o755); err != nil {
		return nil, fmt.Errorf("P9: %w", err)
	}
	if _, err := runProc(ctx, filepath.Join(logs, "pzstd"), pzstd, p9PzstdArgs(large.Path, pz.Path)...); err != nil {
		return nil, fmt.Errorf("P9: writing the pzstd .tar.zst: %w", err)
	}
	files[p9Pzstd] = pz

	ex := p9File{Archive: large, dir: filepath.Join(dir, "export")}
	ex.Path = filepath.Join(ex.dir, "large-00.tar.zst")
	ex.Format, ex.Compression, ex.ZstdWindow = fixture.FormatOCI, fixture.Zstd, 0
	if err := os.MkdirAll(ex.dir, 0o755); err != nil {
		return nil, fmt.Errorf("P9: %w", err)
	}
	if err := h.p9Export(ctx, large, ex.Path, logs); err != nil {
		return nil, err
	}
	files[p9Export] = ex

	for _, f := range p9Files {
		x := files[f]
		fi, err := os.Stat(x.Path)
		if err != nil {
			return nil, fmt.Errorf("P9: %w", err)
		}
		x.Bytes = fi.Size()
		files[f] = x
		frames := ""
		if x.Compression == fixture.Zstd {
			c, err := countZstdFramesFile(x.Path)
			if err != nil {
				return nil, fmt.Errorf("P9: %s: %w", x.Path, err)
			}
			frames = fmt.Sprintf(", %s", c)
		}
		h.logf("P9: %s: %s (%s%s)", p9Label(f), x.Path, formatBytes(x.Bytes), frames)
	}
	return files, nil
}

// p9Export imports the plain tar a into a fresh containerd and writes its
// image to out with holdfast export.
func (h *harness) p9Export(ctx context.Context, a Archive, out, logs string) error {
	return h.withImported(ctx, "P9", a, logs, func(_, data string, st *store) error {
		if _, err := runProc(ctx, filepath.Join(logs, "export"), h.cfg.Tools.Holdfast, p9ExportArgs(st.Address(), data, out, a.Names)...); err != nil {
			return fmt.Errorf("P9: exporting %s: %w", strings.Join(a.Names, " "), err)
		}
		if b, err := os.ReadFile(filepath.Join(logs, "export.err")); err == nil {
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			h.logf("P9: holdfast export: %s", lines[len(lines)-1]) // its summary line
		}
		return nil
	})
}

// withImported runs fn beside a fresh containerd that holds a's images,
// imported with holdfast import (holdfast's data dir: data; its logs in logs,
// or run when empty), in a run dir of its own, removed after it; what
// stands in the errors: the scenario.
func (h *harness) withImported(ctx context.Context, scenario string, a Archive, logs string, fn func(run, data string, st *store) error) (err error) {
	run, err := h.newRunDir()
	if err != nil {
		return err
	}
	defer func() {
		if rerr := os.RemoveAll(run); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing %s: %w", run, rerr))
		}
	}()
	st, err := startStore(ctx, filepath.Join(run, "containerd"), h.cfg.Tools.Holdfast)
	if err != nil {
		return fmt.Errorf("%s: starting containerd for the export: %w", scenario, err)
	}
	defer func() {
		if serr := st.stop(ctx); serr != nil {
			err = errors.Join(err, serr)
		}
	}()
	if logs == "" {
		logs = run
	}
	data := filepath.Join(run, "holdfast")
	if _, err := runProc(ctx, filepath.Join(logs, "import"), h.cfg.Tools.Holdfast, importArgs(st.Address(), data, a.Path)...); err != nil {
		return fmt.Errorf("%s: importing %s to export it: %w", scenario, a.Path, err)
	}
	return fn(run, data, st)
}

// p9Sync is holdfast sync (direct) of f's images dir, on the CPU set cpus.
func (h *harness) p9Sync(method, taskset, cpus string, f p9File) coldMethod {
	return coldMethod{
		scenario: ScenarioP9, method: method, containerd: true, names: f.Names, pinned: true, bytes: f.Bytes,
		run: func(ctx context.Context, env coldEnv) (procRun, error) {
			bin, args := p9SyncArgs(taskset, h.cfg.Tools.Holdfast, cpus, env.st.Address(), filepath.Join(env.dir, "holdfast"), f.dir)
			r, err := runProc(ctx, filepath.Join(env.dir, "sync"), bin, args...)
			if err != nil {
				return r, err
			}
			if _, err := parseSummary(r.Stdout); err != nil {
				return r, err
			}
			return r, nil
		},
	}
}

// p9Drain decodes f to nothing in the harness with workers goroutines (0:
// archive.DrainWorkers's default), as the decode floor does.
func (h *harness) p9Drain(method string, f p9File, workers int) coldMethod {
	return coldMethod{
		scenario: ScenarioP9, method: method, bytes: f.Bytes,
		run: func(ctx context.Context, _ coldEnv) (procRun, error) {
			var r procRun
			cpu0 := selfCPU()
			start := time.Now()
			n, err := DrainFloor(ctx, f.Path, workers)
			r.Wall = time.Since(start)
			r.CPU = selfCPU() - cpu0
			if err == nil && f.decoded > 0 && n != f.decoded {
				err = fmt.Errorf("decoding %s: %d bytes, want %d", f.Path, n, f.decoded)
			}
			return r, err
		},
	}
}

// DrainFloor decodes the archive at path to nothing with
// archive.DrainWorkers and workers goroutines for a multi-frame zstd stream
// (0: its default, min(GOMAXPROCS, 4)), and returns the decoded size. A
// plain tar is read as the walk reads it; a stream that ends early or is
// corrupt is an error.
func DrainFloor(ctx context.Context, path string, workers int) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("decoding %s: %w", path, err)
	}
	defer f.Close()
	n, _, err := archive.DrainWorkers(f, workers)
	if err != nil {
		return n, fmt.Errorf("decoding %s: %w", path, err)
	}
	return n, nil
}

// zstdFrameCount counts the frames of a zstd stream.
type zstdFrameCount struct {
	Frames    int // zstd frames
	Skippable int // skippable frames (pzstd's size headers, a seek table)
}

func (c zstdFrameCount) String() string {
	return fmt.Sprintf("%d zstd frame(s), %d skippable", c.Frames, c.Skippable)
}

// Frame magics (RFC 8878).
const (
	zstdMagic          = 0xFD2FB528
	zstdSkippableMagic = 0x184D2A50 // the low four bits are free
)

// countZstdFramesFile counts the frames of the zstd file at path.
func countZstdFramesFile(path string) (zstdFrameCount, error) {
	f, err := os.Open(path)
	if err != nil {
		return zstdFrameCount{}, err
	}
	defer f.Close()
	return countZstdFrames(f)
}

// countZstdFrames walks a zstd stream frame by frame and block by block,
// skipping the blocks' bytes without decoding them, and counts its frames.
// A stream that ends inside a frame, or holds anything but frames, is an
// error naming the offset.
func countZstdFrames(r io.Reader) (zstdFrameCount, error) {
	w := &frameWalk{r: bufio.NewReaderSize(r, 1<<16)}
	var c zstdFrameCount
	for {
		start := w.off
		var m [4]byte
		n, err := io.ReadFull(w.r, m[:])
		w.off += int64(n)
		if errors.Is(err, io.EOF) {
			return c, nil
		}
		if err != nil {
			return c, fmt.Errorf("zstd stream: a frame at %d is cut off", start)
		}
		switch magic := binary.LittleEndian.Uint32(m[:]); {
		case magic&^0xF == zstdSkippableMagic:
			size, err := w.uint32()
			if err == nil {
				err = w.skip(int64(size))
			}
			if err != nil {
				return c, fmt.Errorf("zstd stream: skippable frame at %d: %w", start, err)
			}
			c.Skippable++
		case magic == zstdMagic:
			if err := w.frame(); err != nil {
				return c, fmt.Errorf("zstd stream: frame at %d: %w", start, err)
			}
			c.Frames++
		default:
			return c, fmt.Errorf("zstd stream: no frame at %d (magic %#08x)", start, magic)
		}
	}
}

// frameWalk reads a zstd stream, counting its offset.
type frameWalk struct {
	r   *bufio.Reader
	off int64
}

// frame skips one zstd frame after its magic: its header, its blocks and
// its checksum.
func (w *frameWalk) frame() error {
	fhd, err := w.r.ReadByte()
	if err != nil {
		return io.ErrUnexpectedEOF
	}
	w.off++
	if fhd&0x08 != 0 {
		return errors.New("reserved bit set in the frame header")
	}
	single := fhd&0x20 != 0
	n := int64([4]int{0, 1, 2, 4}[fhd&3]) // dictionary ID
	if !single {
		n++ // window descriptor
	}
	switch fhd >> 6 { // frame content size
	case 0:
		if single {
			n++
		}
	case 1:
		n += 2
	case 2:
		n += 4
	case 3:
		n += 8
	}
	if err := w.skip(n); err != nil {
		return err
	}
	for {
		var b [3]byte
		k, err := io.ReadFull(w.r, b[:])
		w.off += int64(k)
		if err != nil {
			return io.ErrUnexpectedEOF
		}
		v := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16
		last, kind, size := v&1 == 1, (v>>1)&3, int64(v>>3)
		switch kind {
		case 0, 2: // raw, compressed
		case 1: // RLE: one byte repeated size times
			size = 1
		default:
			return fmt.Errorf("reserved block type at %d", w.off-3)
		}
		if err := w.skip(size); err != nil {
			return err
		}
		if last {
			break
		}
	}
	if fhd&0x04 != 0 { // content checksum
		return w.skip(4)
	}
	return nil
}

func (w *frameWalk) uint32() (uint32, error) {
	var b [4]byte
	n, err := io.ReadFull(w.r, b[:])
	w.off += int64(n)
	if err != nil {
		return 0, io.ErrUnexpectedEOF
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

func (w *frameWalk) skip(n int64) error {
	for n > 0 {
		k, err := w.r.Discard(int(min(n, 1<<30)))
		w.off += int64(k)
		n -= int64(k)
		if err != nil {
			return io.ErrUnexpectedEOF
		}
	}
	return nil
}

// p9Targets evaluates P9's targets: for each multi-frame file, its import
// (holdfast on all CPUs) ÷ the one-frame file's ≤ 1.0× and ÷ the plain
// tar's ≤ 1.4×, and its decoding alone with two workers ÷ with one ≤ 0.6×.
// Left out when P9 did not run.
func p9Targets(stats []Stat) []Outcome {
	median := func(method string) float64 {
		s := findStat(stats, ScenarioP9, method)
		if s == nil || s.N == 0 {
			return math.NaN()
		}
		return float64(s.Median)
	}
	if findStat(stats, ScenarioP9, MethodHoldfastDirect) == nil {
		return nil
	}
	var out []Outcome
	for _, f := range p9MultiFrame {
		label := "P9 " + f
		imp := median(p9ImportMethod(f, p9AllCPUs))
		out = append(out,
			Target{ID: label + " vs one frame", What: "holdfast sync (direct) of the " + p9Label(f) + " ÷ of the one-frame .tar.zst", Op: AtMost, Limit: p9LimitVsOneFrame, Unit: "×"}.
				Evaluate(Ratio(imp, median(p9ImportMethod(p9One, p9AllCPUs)))),
			Target{ID: label + " vs tar", What: "holdfast sync (direct) of the " + p9Label(f) + " ÷ of the plain .tar", Op: AtMost, Limit: p9LimitVsTar, Unit: "×"}.
				Evaluate(Ratio(imp, median(p9ImportMethod(p9Tar, p9AllCPUs)))),
			Target{ID: label + " decode 2 ÷ 1 workers", What: "the " + p9Label(f) + " decoded alone: 2 workers ÷ 1", Op: AtMost, Limit: p9LimitScaling, Unit: "×"}.
				Evaluate(Ratio(median(p9DecodeMethod(f, 2)), median(p9DecodeMethod(f, 1)))))
	}
	return out
}

// WriteP9Report writes P9's own tables, after WriteReport's: the imports of
// each file on each CPU set with their CPU per GiB and ratios, how they
// scale from one CPU to two, and the decoding alone. Nothing when P9 did
// not run.
func WriteP9Report(w io.Writer, r *Results) error {
	stat := func(method string) *Stat {
		s := findStat(r.Stats, ScenarioP9, method)
		if s == nil || s.N == 0 {
			return nil
		}
		return s
	}
	if findStat(r.Stats, ScenarioP9, MethodHoldfastDirect) == nil || r.Archives == nil {
		return nil
	}
	content := float64(r.Archives.Large.Bytes) / gib
	median := func(s *Stat) float64 {
		if s == nil {
			return math.NaN()
		}
		return float64(s.Median)
	}
	ratio := func(s, base *Stat) string {
		v := Ratio(median(s), median(base))
		if math.IsNaN(v) {
			return ""
		}
		return fmtNum(v) + "×"
	}
	var b strings.Builder
	b.WriteString("\nP9, zstd frames: the large archive's image as a plain .tar, as a one-frame .tar.zst (klauspost/compress, as P1's), " +
		"through `pzstd -p 2 -3` and as `holdfast export` writes it (seekable zstd); each imported cold with holdfast sync --write-path=direct, " +
		"holdfast on all CPUs, on CPU 0 and on CPUs 0,1 (taskset; containerd unrestricted).\n\n")

	var rows [][]string
	for _, cpus := range p9CPUSets {
		for _, f := range p9Files {
			s := findStat(r.Stats, ScenarioP9, p9ImportMethod(f, cpus))
			if s == nil {
				continue
			}
			ok := stat(s.Method)
			perGiB, vsTar, vsOne := "–", "", ""
			if ok != nil {
				perGiB = fmtNum((float64(s.ClientCPU)+float64(s.ContainerdCPU))/content) + " CPU-s"
				if f != p9Tar {
					vsTar = ratio(ok, stat(p9ImportMethod(p9Tar, cpus)))
				}
				if f == p9Pzstd || f == p9Export {
					vsOne = ratio(ok, stat(p9ImportMethod(p9One, cpus)))
				}
			}
			rows = append(rows, []string{p9Label(f), p9CPULabel(cpus), formatBytes(s.Bytes), formatSeconds(float64(s.Median)),
				formatSeconds(float64(s.Min)) + " – " + formatSeconds(float64(s.Max)), countString(*s),
				formatSeconds(float64(s.ClientCPU)), formatSeconds(float64(s.ContainerdCPU)), formatSeconds(float64(s.OtherCPU)), perGiB, vsTar, vsOne})
		}
	}
	writeTable(&b, []string{"file", "holdfast on", "size", "median", "min – max", "n", "holdfast CPU", "containerd CPU", "other CPU",
		"CPU per GiB", "÷ .tar", "÷ one frame"}, rows)
	fmt.Fprintf(&b, "\nCPU per GiB: median holdfast CPU + median containerd CPU ÷ %s, the image as a plain tar (the same content in every file, "+
		"so the rows compare). ÷ .tar and ÷ one frame: this median ÷ that file's on the same CPUs.\n\n", formatBytes(r.Archives.Large.Bytes))

	rows = nil
	for _, f := range p9Files {
		one, two := stat(p9ImportMethod(f, p9OneCPU)), stat(p9ImportMethod(f, p9TwoCPUs))
		if one == nil && two == nil {
			continue
		}
		all := stat(p9ImportMethod(f, p9AllCPUs))
		cell := func(s *Stat) string {
			if s == nil {
				return "–"
			}
			return formatSeconds(float64(s.Median))
		}
		rows = append(rows, []string{p9Label(f), cell(one), cell(two), cell(all), ratio(one, two)})
	}
	if len(rows) > 0 {
		writeTable(&b, []string{"file", "holdfast on CPU 0", "on CPUs 0,1", "on all CPUs", "CPU 0 ÷ CPUs 0,1"}, rows)
		b.WriteString("\nHow each import scales from one CPU to two (medians): a file that decodes on one core gains less than one whose frames decode on both.\n\n")
	}

	rows = nil
	decodeRow := func(f, workers, method string) []string {
		s := findStat(r.Stats, ScenarioP9, method)
		if s == nil {
			return nil
		}
		return []string{p9Label(f), workers, formatSeconds(float64(s.Median)),
			formatSeconds(float64(s.Min)) + " – " + formatSeconds(float64(s.Max)), countString(*s), formatSeconds(float64(s.ClientCPU))}
	}
	for _, f := range p9Files {
		if row := decodeRow(f, "default", p9FloorMethod(f)); row != nil {
			rows = append(rows, append(row, "", ratio(stat(p9ImportMethod(f, p9AllCPUs)), stat(p9FloorMethod(f)))))
		}
	}
	for _, f := range p9MultiFrame {
		for _, n := range p9Workers {
			m := p9DecodeMethod(f, n)
			if row := decodeRow(f, fmt.Sprint(n), m); row != nil {
				vs := ""
				if n != 1 {
					vs = ratio(stat(m), stat(p9DecodeMethod(f, 1)))
				}
				rows = append(rows, append(row, vs, ""))
			}
		}
	}
	if len(rows) > 0 {
		writeTable(&b, []string{"decoded alone", "workers", "median", "min – max", "n", "CPU", "÷ 1 worker", "import ÷ this"}, rows)
		b.WriteString("\nThe file decoded to nothing in the harness with archive.DrainWorkers (default workers: min(GOMAXPROCS, 4) of the harness), " +
			"no tar, no hash, no write: the floor of its import. import ÷ this: the import on all CPUs ÷ this floor.\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

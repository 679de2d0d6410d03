package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"

	"github.com/holdfast-project/holdfast/internal/embedded"
)

// Namespace is the containerd namespace everything is imported into: the
// CRI's, where the CRI plugin adds its own labels and sha256 records, as on a
// node.
const Namespace = "k8s.io"

// The pin labels holdfast puts on every record it owns.
const (
	LabelCRIPinned      = "io.cri-containerd.pinned"
	LabelHoldfastPinned = "io.holdfast.pinned"
	pinnedValue         = "pinned"
)

// stopTimeout bounds the stop of a containerd or a child process.
const stopTimeout = 30 * time.Second

// store is a fresh containerd (the embedded one, or Debian's 1.6) and a
// client of it.
type store struct {
	proc   *embedded.Process // the embedded containerd; nil for Debian's 1.6
	old    *daemon16         // Debian's 1.6; nil for the embedded one
	client *containerd.Client
}

// startStore starts holdfast's embedded containerd on a new data dir.
func startStore(ctx context.Context, dataDir, holdfast string) (*store, error) {
	return startStoreWith(ctx, dataDir, embedded.Options{Binary: holdfast})
}

func startStoreWith(ctx context.Context, dataDir string, opts embedded.Options) (*store, error) {
	proc, err := embedded.Start(ctx, dataDir, opts)
	if err != nil {
		return nil, err
	}
	c, err := containerd.New(proc.Address(), containerd.WithDefaultNamespace(Namespace), containerd.WithTimeout(30*time.Second))
	if err != nil {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
		defer cancel()
		return nil, fmt.Errorf("connecting to containerd at %s: %w", proc.Address(), errors.Join(err, proc.Stop(stopCtx)))
	}
	return &store{proc: proc, client: c}, nil
}

// startStore16 starts Debian's containerd 1.6 (bin) on a new dir, with its
// CRI plugin, and waits until it answers.
func startStore16(ctx context.Context, dir, bin string) (*store, error) {
	d, err := startDaemon16(ctx, dir, bin)
	if err != nil {
		return nil, err
	}
	st := &store{old: d}
	st.client, err = containerd.New(d.sock, containerd.WithDefaultNamespace(Namespace), containerd.WithTimeout(30*time.Second))
	if err == nil {
		err = d.waitAnswer(ctx, st.client)
	}
	if err != nil {
		if st.client != nil {
			st.client.Close()
		}
		return nil, fmt.Errorf("connecting to containerd 1.6 at %s: %w", d.sock, errors.Join(err, d.stop()))
	}
	return st, nil
}

// Address is the containerd socket.
func (s *store) Address() string {
	if s.old != nil {
		return s.old.sock
	}
	return s.proc.Address()
}

// stop closes the client and stops containerd (the embedded one unmounts
// what it mounted; for 1.6 the harness unmounts it). It runs even when ctx
// is already cancelled.
func (s *store) stop(ctx context.Context) error {
	if s.old != nil {
		return errors.Join(s.client.Close(), s.old.stop())
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	return errors.Join(s.client.Close(), s.proc.Stop(ctx))
}

// pid is containerd's process id.
func (s *store) pid() int {
	if s.old != nil {
		return s.old.cmd.Process.Pid
	}
	return s.proc.PID()
}

// cpu is the CPU time containerd has used so far.
func (s *store) cpu() (time.Duration, error) { return processCPU(s.pid()) }

// checkImages checks that every name has a record; with pinned, that it
// carries both of holdfast's pin labels.
func (s *store) checkImages(ctx context.Context, names []string, pinned bool) error {
	is := s.client.ImageService()
	for _, n := range names {
		img, err := is.Get(ctx, n)
		if errdefs.IsNotFound(err) {
			return fmt.Errorf("image %s is not in containerd", n)
		}
		if err != nil {
			return fmt.Errorf("looking up %s: %w", n, err)
		}
		if pinned && !isPinned(img) {
			return fmt.Errorf("image %s is not pinned (labels %v)", n, img.Labels)
		}
	}
	return nil
}

// isPinned reports whether img carries both of holdfast's pin labels.
func isPinned(img images.Image) bool {
	return img.Labels[LabelCRIPinned] == pinnedValue && img.Labels[LabelHoldfastPinned] == pinnedValue
}

// clockTick is the unit of /proc/<pid>/stat times (USER_HZ, 100 on every
// Linux architecture Go supports).
const clockTick = 10 * time.Millisecond

// processCPU is the user + system CPU time of a process, all its threads.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of pid %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces: the fields after it start
	// after its closing parenthesis, with the state (field 3).
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("reading the CPU time of pid %d: malformed /proc/%d/stat", pid, pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("reading the CPU time of pid %d: malformed /proc/%d/stat", pid, pid)
	}
	var total time.Duration
	for _, s := range f[11:13] { // utime, stime: fields 14 and 15
		t, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading the CPU time of pid %d: %w", pid, err)
		}
		total += time.Duration(t) * clockTick
	}
	return total, nil
}

// cpuMeter measures, over one sample, the CPU time containerd used and the
// CPU time the rest of the machine used: everything busy in /proc/stat but
// containerd, the harness and the measured child. The rest is other work on
// a shared machine (noise), and the kernel's own threads (writeback, the
// journal), which the measured I/O also wakes.
type cpuMeter struct {
	st                *store // nil: no containerd
	cd0, self0, busy0 time.Duration
}

func startMeter(st *store) cpuMeter {
	m := cpuMeter{st: st, self0: selfCPU(), busy0: machineBusy()}
	if st != nil {
		m.cd0, _ = st.cpu()
	}
	return m
}

// finish fills in the sample's containerd and other CPU times; child is the
// CPU time of the measured child processes (0 when the harness itself did
// the work).
func (m cpuMeter) finish(s *Sample, child time.Duration) {
	var cd time.Duration
	if m.st != nil {
		if cd1, err := m.st.cpu(); err == nil {
			cd = cd1 - m.cd0
		}
	}
	s.ContainerdCPUSeconds = cd.Seconds()
	other := machineBusy() - m.busy0 - cd - (selfCPU() - m.self0) - child
	s.OtherCPUSeconds = max(other, 0).Seconds()
}

// machineBusy is the CPU time all CPUs spent busy since boot (user, nice,
// system, irq, softirq, steal), from /proc/stat.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var total time.Duration
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system (idle iowait) irq softirq steal
		n, _ := strconv.ParseInt(f[i], 10, 64)
		total += time.Duration(n) * clockTick
	}
	return total
}

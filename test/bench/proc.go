package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// procRun is one finished child process.
type procRun struct {
	Wall   time.Duration
	CPU    time.Duration // user + system, from its rusage
	MaxRSS int64         // bytes, from its rusage (ru_maxrss)
	Stdout string
}

// newCmd makes a child process that the harness, not the terminal, stops:
// its own process group (a ^C reaches the harness only, which stops children
// in order), SIGTERM when ctx is cancelled and SIGKILL 10 s later, and
// SIGKILL if the harness dies (Pdeathsig). Output goes to <logBase>.out and
// <logBase>.err.
func newCmd(ctx context.Context, logBase, bin string, args ...string) (*exec.Cmd, func(), error) {
	if err := os.MkdirAll(filepath.Dir(logBase), 0o755); err != nil {
		return nil, nil, err
	}
	stdout, err := os.Create(logBase + ".out")
	if err != nil {
		return nil, nil, err
	}
	stderr, err := os.Create(logBase + ".err")
	if err != nil {
		stdout.Close()
		return nil, nil, err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	return cmd, func() { stdout.Close(); stderr.Close() }, nil
}

// runProc runs bin to completion and times it from just before the fork to
// just after the reap. A non-zero exit is an error with the end of stderr.
func runProc(ctx context.Context, logBase, bin string, args ...string) (procRun, error) {
	var r procRun
	what := filepath.Base(bin) + " " + strings.Join(args, " ")
	cmd, closeLogs, err := newCmd(ctx, logBase, bin, args...)
	if err != nil {
		return r, fmt.Errorf("running %s: %w", what, err)
	}
	start := time.Now()
	err = cmd.Start()
	var hwm *hwmSampler
	if err == nil {
		hwm = sampleHWM(cmd.Process.Pid)
		err = cmd.Wait()
	}
	r.Wall = time.Since(start)
	closeLogs()
	if ps := cmd.ProcessState; ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			r.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			r.MaxRSS = childMaxRSS(ru.Maxrss<<10, hwm.stop())
		}
	}
	out, _ := os.ReadFile(logBase + ".out")
	r.Stdout = string(out)
	if err != nil {
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		return r, fmt.Errorf("running %s: %w%s", what, err, logTail(logBase+".err"))
	}
	return r, nil
}

// logTail is "; stderr: <last lines>" of a log file, or "".
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return ""
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return "; stderr:\n" + strings.Join(lines, "\n")
}

// hwmSampler reads a child's VmHWM (its peak RSS so far) every few
// milliseconds while it runs.
type hwmSampler struct {
	done chan struct{}
	peak chan int64
}

func sampleHWM(pid int) *hwmSampler {
	h := &hwmSampler{done: make(chan struct{}), peak: make(chan int64, 1)}
	path := fmt.Sprintf("/proc/%d/status", pid)
	go func() {
		var peak int64
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if v := readHWM(path); v > peak {
				peak = v
			}
			select {
			case <-h.done:
				h.peak <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

// stop ends the sampling and returns the largest VmHWM seen, in bytes.
func (h *hwmSampler) stop() int64 {
	if h == nil {
		return 0
	}
	close(h.done)
	return <-h.peak
}

// readHWM is the VmHWM of a /proc/<pid>/status file in bytes, 0 when the
// process is gone (or a zombie: its memory is released before it is reaped).
func readHWM(path string) int64 { return procKiB(path, "VmHWM:") }

// childMaxRSS is a child's peak RSS. Its rusage ru_maxrss is not enough on
// its own: Go forks with CLONE_VM, so the child starts on the harness's
// memory, and exec records that memory's high-water mark in the child's
// maxrss. When the rusage value is above the harness's own peak, it is the
// child's; otherwise the child stayed below it and the VmHWM samples (taken
// every 5 ms) are the measure.
func childMaxRSS(rusage, sampled int64) int64 {
	var self syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &self) == nil && rusage > self.Maxrss<<10 {
		return rusage
	}
	return max(sampled, 0)
}

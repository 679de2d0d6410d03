package cluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// proc is one component of the cluster, started by the suite and stopped by it.
type proc struct {
	name string
	log  string // its stdout and stderr
	cmd  *exec.Cmd
	done chan struct{} // closed once it has exited and been reaped
	err  error         // its exit status, set before done closes
}

// startProc starts argv with its output appended to logPath. It runs in its own process group (a terminal's ^C
// reaches the test only) and gets SIGKILL if the test process dies. The kernel ties that signal to the thread
// that forked, so the fork happens on a goroutine that stays locked to its thread for the child's whole life.
func startProc(name, logPath string, env []string, argv ...string) (*proc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	return startProcWith(cmd, name, logPath)
}

// startProcWith starts cmd as startProc does; an Stdout already set (a pipe) is kept.
func startProcWith(cmd *exec.Cmd, name, logPath string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	defer logf.Close()
	if cmd.Stdout == nil {
		cmd.Stdout = logf
	}
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &proc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine, after the child
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting %s (%s): %w", name, cmd.Path, err)
	}
	return p, nil
}

// exited says whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to grace, then SIGKILL, and waits for the exit.
func (p *proc) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string {
	return tailFile(p.log, n)
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	b = bytes.TrimRight(b, "\n")
	lines := strings.Split(string(b), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// run runs a short command and returns its stdout; the error names the command and carries its stderr.
func run(argv ...string) (string, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("running %s: %w: %s%s", strings.Join(argv, " "), err, bytes.TrimSpace(stderr.Bytes()), bytes.TrimSpace(out))
	}
	return string(out), nil
}

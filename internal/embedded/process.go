package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
)

const (
	// defaultStartTimeout bounds Start when its ctx has no deadline.
	defaultStartTimeout = 30 * time.Second
	// defaultStopTimeout is the SIGTERM grace period when Stop's ctx has no
	// deadline.
	defaultStopTimeout = 10 * time.Second
	// killTimeout bounds the wait for the exit after SIGKILL.
	killTimeout = 10 * time.Second
	// logTailLines and logTailBytes bound the log excerpt in start errors.
	logTailLines = 20
	logTailBytes = 8 << 10
)

// Process is a running embedded containerd, started by [Start].
type Process struct {
	layout    Layout
	cmd       *exec.Cmd
	logOffset int64

	done    chan struct{} // closed once the child has exited and been reaped
	waitErr error         // the child's exit status; set before done closes

	stopOnce sync.Once
	stopErr  error
}

// BinaryName is the embedded containerd's executable, installed next to holdfast.
const BinaryName = "holdfast-containerd"

// Binary finds the embedded containerd's executable: beside the running
// executable, else in PATH.
func Binary() (string, error) {
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), BinaryName); isExecutable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath(BinaryName); err == nil {
		return p, nil
	}
	self, _ := os.Executable()
	return "", fmt.Errorf("the embedded containerd, %s, is neither beside %s nor in PATH: install it there, or give --address of a running containerd", BinaryName, self)
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// Start writes the config for dataDir ([WriteConfig]) and runs
// `<binary> containerd --config <file>` as a child process, then waits until
// containerd answers the gRPC health service on its socket. The child:
//
//   - runs in its own process group, so a terminal's ^C reaches holdfast
//     only, and holdfast stops containerd in order;
//   - appends stdout and stderr to Layout.Log;
//   - gets SIGKILL if holdfast dies (Pdeathsig). The kernel ties Pdeathsig to
//     the OS thread that forked, not the process, so the fork happens on a
//     goroutine locked to its thread for the child's whole life: that thread
//     can't be retired while containerd runs.
//
// ctx bounds the start (30 s when it has no deadline) and nothing else:
// cancelling it later does not stop containerd; [Process.Stop] does. If the
// child exits before it is ready, or the deadline passes, Start stops it and
// returns an error that ends with the last lines of its log. Start refuses to
// start a second containerd on a data dir whose socket already answers.
func Start(ctx context.Context, dataDir string, opts Options) (*Process, error) {
	l, err := WriteConfig(dataDir, opts)
	if err != nil {
		return nil, fmt.Errorf("starting containerd: %w", err)
	}
	if serving(l.Address) {
		return nil, fmt.Errorf("starting containerd: a containerd already serves %s", l.Address)
	}
	bin := opts.Binary
	if bin == "" {
		if bin, err = Binary(); err != nil {
			return nil, fmt.Errorf("starting containerd: %w", err)
		}
	}

	logf, err := os.OpenFile(l.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("starting containerd: %w", err)
	}
	defer logf.Close() // the child has its own copy once started
	offset, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, fmt.Errorf("starting containerd: %w", err)
	}

	cmd := exec.Command(bin, "containerd", "--config", l.Config)
	cmd.Dir = l.Dir
	cmd.Env = childEnv(os.Environ())
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	p := &Process{layout: l, cmd: cmd, logOffset: offset, done: make(chan struct{})}
	started := make(chan error, 1)
	go p.run(started)
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting containerd: %w", err)
	}

	if err := p.waitReady(ctx); err != nil {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), defaultStopTimeout)
		defer cancel()
		return nil, fmt.Errorf("starting containerd: %w", errors.Join(err, p.Stop(stopCtx)))
	}
	return p, nil
}

// run starts the child and reaps it, on a goroutine locked to its OS thread
// (see Start: Pdeathsig). It never unlocks: the thread exits with the
// goroutine, after the child is gone.
func (p *Process) run(started chan<- error) {
	runtime.LockOSThread()
	if err := p.cmd.Start(); err != nil {
		started <- err
		return
	}
	started <- nil
	p.waitErr = p.cmd.Wait()
	close(p.done)
}

// waitReady polls the gRPC health service until it reports SERVING, the child
// exits, or ctx (30 s by default) runs out.
func (p *Process) waitReady(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultStartTimeout)
		defer cancel()
	}
	conn, err := grpc.NewClient("unix://"+p.layout.Address,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", p.layout.Address, err)
	}
	defer conn.Close()
	health := grpc_health_v1.NewHealthClient(conn)

	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		select {
		case <-p.done:
			return fmt.Errorf("containerd exited before it was ready (%v)%s", p.waitErr, p.logTail())
		case <-ctx.Done():
			cause := ctx.Err()
			if lastErr != nil {
				cause = fmt.Errorf("%w (last health check: %v)", cause, lastErr)
			}
			return fmt.Errorf("waiting for containerd on %s: %w%s", p.layout.Address, cause, p.logTail())
		case <-tick.C:
		}
		if _, err := os.Stat(p.layout.Address); err != nil {
			continue // not listening yet (containerd removes a stale socket first)
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := health.Check(cctx, &grpc_health_v1.HealthCheckRequest{})
		cancel()
		switch {
		case err != nil:
			lastErr = err
		case resp.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING:
			lastErr = fmt.Errorf("health status %s", resp.GetStatus())
		default:
			return nil
		}
	}
}

// Stop stops containerd: SIGTERM, then, once ctx is done (10 s when it has no
// deadline), SIGKILL to its whole process group. After the exit it unmounts
// whatever is still mounted under Root, State and Temp (deepest first, lazily
// as a last resort), so nothing leaks. Stop is idempotent and safe to call
// after containerd exited by itself; later calls return the first result.
func (p *Process) Stop(ctx context.Context) error {
	p.stopOnce.Do(func() { p.stopErr = p.stop(ctx) })
	return p.stopErr
}

func (p *Process) stop(ctx context.Context) error {
	var errs []error
	select {
	case <-p.done:
	default:
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, fmt.Errorf("sending SIGTERM to pid %d: %w", p.PID(), err))
		}
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, defaultStopTimeout)
			defer cancel()
		}
		select {
		case <-p.done:
		case <-ctx.Done():
			// The group's id is the child's pid; the child is not reaped
			// yet (done is open), so the id can't have been reused.
			if err := syscall.Kill(-p.PID(), syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("killing process group %d: %w", p.PID(), err))
			}
			select {
			case <-p.done:
			case <-time.After(killTimeout):
				errs = append(errs, fmt.Errorf("pid %d still running %s after SIGKILL", p.PID(), killTimeout))
			}
		}
	}
	if err := unmountUnder(p.layout.Root, p.layout.State, p.layout.Temp); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stopping containerd: %w", err)
	}
	return nil
}

// Address is the containerd gRPC socket to connect clients to.
func (p *Process) Address() string { return p.layout.Address }

// Layout is the data dir layout the process runs with, Snapshotter included.
func (p *Process) Layout() Layout { return p.layout }

// PID is the containerd child's process id (also its process group id).
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed when the containerd child has exited, whether by Stop or on
// its own (a crash: the caller should restart or exit non-zero).
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the child's exit status once Done is closed (nil for a clean exit),
// with the last lines of its log when it failed; nil before.
func (p *Process) Err() error {
	select {
	case <-p.done:
	default:
		return nil
	}
	if p.waitErr == nil {
		return nil
	}
	return fmt.Errorf("containerd exited: %w%s", p.waitErr, p.logTail())
}

// serving reports whether something accepts connections on the unix socket.
func serving(address string) bool {
	c, err := net.DialTimeout("unix", address, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// childEnv is the parent's environment without the service manager's
// variables: containerd would otherwise send sd_notify READY=1 as if it were
// holdfast, or take holdfast's socket-activation fds.
func childEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "NOTIFY_SOCKET", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "WATCHDOG_PID", "WATCHDOG_USEC":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// logTail returns "; last lines of <log>:\n..." with the end of what the
// child wrote to its log during this run, or "" when there is nothing.
func (p *Process) logTail() string {
	f, err := os.Open(p.layout.Log)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	start := max(p.logOffset, fi.Size()-logTailBytes)
	b, err := io.ReadAll(io.NewSectionReader(f, start, fi.Size()-start))
	if err != nil {
		return ""
	}
	if start > p.logOffset {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:] // drop the partial first line
		}
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	text := strings.Join(lines, "\n")
	if strings.TrimSpace(text) == "" {
		return ""
	}
	return fmt.Sprintf("; last lines of %s:\n%s", p.layout.Log, text)
}

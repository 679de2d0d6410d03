package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

// DefaultContainerd16 is where Debian 12's containerd 1.6 is installed.
const DefaultContainerd16 = "/usr/bin/containerd"

// check16 says why bin cannot be used as containerd 1.6, or "" when it can.
func check16(bin string) string { return testenv.Not16(bin) }

// daemon16 is Debian's containerd 1.6 running on a dir of its own.
type daemon16 struct {
	dir, sock string
	cmd       *exec.Cmd
	done      chan struct{}
	waitErr   error
}

// startDaemon16 writes a config as the end-to-end tests do
// (testenv.Containerd16Config, CRI on, overlayfs) and starts bin with it.
func startDaemon16(ctx context.Context, dir, bin string) (*daemon16, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("starting containerd 1.6: %w", err)
	}
	d := &daemon16{dir: dir, sock: filepath.Join(dir, "c.sock")}
	cfg := testenv.Containerd16CRIConfig(dir, d.sock)
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, fmt.Errorf("starting containerd 1.6: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(dir, "containerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("starting containerd 1.6: %w", err)
	}
	defer logf.Close()
	d.cmd = exec.Command(bin, "--config", cfgPath)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting containerd 1.6: %w", err)
	}
	d.done = make(chan struct{})
	go func() { d.waitErr = d.cmd.Wait(); close(d.done) }()
	return d, nil
}

// waitAnswer waits until containerd answers a version request (30 s at most).
func (d *daemon16) waitAnswer(ctx context.Context, c *containerd.Client) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-d.done:
			return fmt.Errorf("containerd 1.6 exited: %v%s", d.waitErr, logTail(filepath.Join(d.dir, "containerd.log")))
		default:
		}
		vctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.Version(vctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd 1.6 does not answer: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop stops containerd (SIGTERM, then SIGKILL to its group after 20 s) and
// unmounts whatever is still mounted under its dir.
func (d *daemon16) stop() error {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.done
	}
	return unmountUnder(d.dir)
}

// unmountUnder unmounts every mount below dir, deepest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("listing the mounts under %s: %w", dir, err)
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 {
			if p := unescapeMount(fields[4]); strings.HasPrefix(p, dir+"/") {
				points = append(points, p)
			}
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

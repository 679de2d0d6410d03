package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/containerd/errdefs"
)

const (
	// agentReadyTimeout bounds the agent's first pass.
	agentReadyTimeout = 5 * time.Minute
	// healTimeout and watchTimeout bound one latency sample; a sample that
	// times out fails (its latency is not made up).
	healTimeout  = 30 * time.Second
	watchTimeout = 2 * time.Minute
)

// agent measures P4 under `holdfast run` on a fresh containerd: the heal
// archive's images are deleted one by one (each once, so none reaches the
// agent's heal backoff), each timed from the delete call until its record is
// back with both pin labels; then the watch archives are renamed into the
// images dir one by one (mtime an hour in the past, so --settle does not
// apply), each timed from the rename until its record is pinned.
func (h *harness) agent(ctx context.Context) (err error) {
	dir, err := h.newRunDir()
	if err != nil {
		return err
	}
	if err := h.quiesce(); err != nil {
		return err
	}
	images := filepath.Join(dir, "images")
	if err := os.MkdirAll(images, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", images, err)
	}
	heal := filepath.Join(images, filepath.Base(h.arch.Heal.Path))
	if err := os.Link(h.arch.Heal.Path, heal); err != nil {
		return fmt.Errorf("linking %s into the images dir: %w", h.arch.Heal.Path, err)
	}
	st, err := startStore(ctx, filepath.Join(dir, "containerd"), h.cfg.Tools.Holdfast)
	if err != nil {
		return fmt.Errorf("starting containerd for P4: %w", err)
	}
	defer func() {
		if serr := st.stop(ctx); serr != nil {
			err = errors.Join(err, serr)
		}
	}()
	h.noteVersion(ctx, st)

	logBase := filepath.Join(dir, "run")
	a, err := startAgent(ctx, logBase, h.cfg.Tools.Holdfast,
		"run", "--address", st.Address(), "--write-path", WriteDirect, "--data-dir", filepath.Join(dir, "holdfast"),
		"--images", images, "--listen", "127.0.0.1:0", "--settle", "1s")
	if err != nil {
		return err
	}
	defer a.stop()
	h.logf("P4: holdfast run started (pid %d); waiting for its first pass", a.cmd.Process.Pid)
	if err := a.waitReady(ctx, logBase+".err"); err != nil {
		return err
	}
	if err := st.checkImages(ctx, h.arch.Heal.Names, true); err != nil {
		return fmt.Errorf("P4: after the agent's first pass: %w", err)
	}

	w := newPinWatcher(ctx, st)
	defer w.close()
	if err := sleep(ctx, 500*time.Millisecond); err != nil { // let the subscription go live
		return err
	}

	is := st.client.ImageService()
	for i, name := range h.arch.Heal.Names {
		s := Sample{Scenario: ScenarioHeal, Method: MethodAgent, Round: i + 1}
		start := time.Now()
		err := is.Delete(ctx, name)
		s.DeleteSeconds = time.Since(start).Seconds()
		if err == nil {
			var at time.Time
			at, err = w.waitPinned(ctx, name, healTimeout)
			s.Seconds = at.Sub(start).Seconds()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			s.Error = fmt.Sprintf("healing %s: %v", name, err)
		}
		h.record(s)
		if err := a.alive(); err != nil {
			return err
		}
		if err := sleep(ctx, settleGap); err != nil {
			return err
		}
	}

	past := time.Now().Add(-time.Hour)
	for i, x := range h.arch.Watch {
		s := Sample{Scenario: ScenarioWatch, Method: MethodAgent, Round: i + 1}
		dst := filepath.Join(images, filepath.Base(x.Path))
		err := os.Chtimes(x.Path, past, past)
		start := time.Now()
		if err == nil {
			err = os.Rename(x.Path, dst)
		}
		if err == nil {
			var at time.Time
			at, err = w.waitPinned(ctx, x.Names[0], watchTimeout)
			s.Seconds = at.Sub(start).Seconds()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			s.Error = fmt.Sprintf("watching %s: %v", x.Path, err)
		}
		h.record(s)
		if err := a.alive(); err != nil {
			return err
		}
		if err := sleep(ctx, settleGap); err != nil {
			return err
		}
	}
	// Put the renamed archives back where Archives says they are.
	for _, x := range h.arch.Watch {
		_ = os.Rename(filepath.Join(images, filepath.Base(x.Path)), x.Path)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// agentProc is a running `holdfast run` (or another long-running child).
type agentProc struct {
	what      string
	cmd       *exec.Cmd
	cancel    context.CancelFunc
	done      chan struct{}
	waitErr   error
	closeLogs func()
	logBase   string
	// client reaches the agent's listener (nil: a plain client); addr is
	// the listener's address, once waitReady has read it from the log.
	client *http.Client
	addr   string
}

// startAgent starts `holdfast run`; stop ends it with SIGTERM (SIGKILL 10 s
// later).
func startAgent(ctx context.Context, logBase, bin string, args ...string) (*agentProc, error) {
	return startDaemon(ctx, "holdfast run", logBase, bin, args...)
}

// startDaemon starts a long-running child, what it is named in errors (holdfast
// run, spegel); stop ends it with SIGTERM (SIGKILL 10 s later).
func startDaemon(ctx context.Context, what, logBase, bin string, args ...string) (*agentProc, error) {
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cmd, closeLogs, err := newCmd(actx, logBase, bin, args...)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("starting %s: %w", what, err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		closeLogs()
		return nil, fmt.Errorf("starting %s: %w", what, err)
	}
	a := &agentProc{what: what, cmd: cmd, cancel: cancel, done: make(chan struct{}), closeLogs: closeLogs, logBase: logBase}
	go func() {
		a.waitErr = cmd.Wait()
		close(a.done)
	}()
	return a, nil
}

// alive is an error when the agent has exited.
func (a *agentProc) alive() error {
	select {
	case <-a.done:
		return fmt.Errorf("%s exited: %v%s", a.what, a.waitErr, logTail(a.logBase+".err"))
	default:
		return nil
	}
}

// stop sends SIGTERM and waits for the exit (SIGKILL after 10 s). An agent
// that exited by itself is reported by alive, not here.
func (a *agentProc) stop() {
	a.cancel()
	<-a.done
	a.closeLogs()
}

// waitReady waits until the agent serves /readyz with 200: every source of
// its first pass is final. The listen address is read from its log.
func (a *agentProc) waitReady(ctx context.Context, logPath string) error {
	ctx, cancel := context.WithTimeout(ctx, agentReadyTimeout)
	defer cancel()
	re := regexp.MustCompile(`address[=":\s]+"?((?:127\.0\.0\.1|\[::1\]|localhost):\d+)`)
	var addr string
	client := a.client
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Second}
	}
	for {
		if err := a.alive(); err != nil {
			return err
		}
		if addr == "" {
			if b, err := os.ReadFile(logPath); err == nil {
				for _, line := range strings.Split(string(b), "\n") {
					if m := re.FindStringSubmatch(line); m != nil && strings.Contains(line, "readyz") {
						addr = m[1]
					}
				}
			}
		}
		if addr != "" {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
			if err != nil {
				return err
			}
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					a.addr = addr
					return nil
				}
			}
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			if addr == "" {
				return fmt.Errorf("holdfast run did not log its listen address within %s%s", agentReadyTimeout, logTail(logPath))
			}
			return fmt.Errorf("holdfast run's /readyz on %s did not answer 200 within %s%s", addr, agentReadyTimeout, logTail(logPath))
		}
	}
}

// pinWatcher wakes on containerd's image events to check records quickly.
type pinWatcher struct {
	st     *store
	wake   chan struct{}
	cancel context.CancelFunc
}

func newPinWatcher(ctx context.Context, st *store) *pinWatcher {
	ctx, cancel := context.WithCancel(ctx)
	events, errs := st.client.Subscribe(ctx, `topic~="/images/"`)
	w := &pinWatcher{st: st, wake: make(chan struct{}, 1), cancel: cancel}
	go func() {
		for {
			select {
			case <-events:
				select {
				case w.wake <- struct{}{}:
				default:
				}
			case <-errs:
				return // waitPinned polls too
			case <-ctx.Done():
				return
			}
		}
	}()
	return w
}

func (w *pinWatcher) close() { w.cancel() }

// waitPinned returns when name's record carries both pin labels: checked on
// every image event and every 20 ms.
func (w *pinWatcher) waitPinned(ctx context.Context, name string, timeout time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	is := w.st.client.ImageService()
	for {
		img, err := is.Get(ctx, name)
		now := time.Now()
		switch {
		case err == nil && isPinned(img):
			return now, nil
		case err != nil && !errdefs.IsNotFound(err) && ctx.Err() == nil:
			return now, fmt.Errorf("looking up %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return now, fmt.Errorf("not pinned within %s", timeout)
		case <-w.wake:
		case <-tick.C:
		}
	}
}

package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// stopReport is the part of GET /report this test reads.
type stopReport struct {
	Ready  bool `json:"ready"`
	Pinned int  `json:"pinned"`
	Events []struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"events"`
}

func stopReadReport(t *testing.T, a *agentProc) stopReport {
	t.Helper()
	code, body := a.get(t, "/report")
	if code != 200 {
		t.Fatalf("/report: %d %s", code, body)
	}
	var r stopReport
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("/report: %v\n%s", err, body)
	}
	return r
}

// stopLeaseIDs lists the IDs of holdfast's leases, sorted.
func stopLeaseIDs(t *testing.T, d *daemon) []string {
	t.Helper()
	var ids []string
	for _, l := range d.holdfastLeases(t) {
		ids = append(ids, l.ID)
	}
	slices.Sort(ids)
	return ids
}

// TestStopKeepsPins: SIGTERM ends `holdfast run` with exit 0 and unpins and
// releases nothing: both images keep both pin labels and every holdfast/
// lease stays. The agent started again unpins nothing at any moment: no
// image event takes a pin away, it logs no unpin or release, and its journal
// holds no Unpinned or Released event.
func TestStopKeepsPins(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	names := []string{"e2e.local/stop/a:1", "e2e.local/stop/b:1"}
	for i, n := range names {
		writeDockerSave(t, filepath.Join(imagesDir, []string{"a.tar", "b.tar"}[i]), build(t, fixture.ImageSpec{Names: []string{n}}))
	}

	agent := startAgent(t, d, dataDir, []string{imagesDir})
	eventually(t, "ready", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })
	d.waitPinned(t, names...)
	leasesBefore := stopLeaseIDs(t, d)
	var pinnedBefore int // names, name@digest ones too
	eventually(t, "the report to count the pins", func() bool {
		pinnedBefore = stopReadReport(t, agent).Pinned
		return pinnedBefore >= len(names)
	})
	for _, p := range []string{"a.tar", "b.tar"} {
		if _, ok := d.leaseOf(t, filepath.Join(imagesDir, p)); !ok {
			t.Fatalf("no lease for %s before the stop: %v", p, leasesBefore)
		}
	}
	rec, _ := d.record(t, names[0])
	w := watchImages(t, d, rec.Target)

	// SIGTERM: exit 0 within the deadline.
	if err := agent.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-agent.exited:
		if err != nil {
			t.Fatalf("holdfast run exited with %v after SIGTERM\n%s", err, tail(agent.dump(), 20))
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("holdfast run did not exit within 60s of SIGTERM\n%s", tail(agent.dump(), 20))
	}
	if n := agent.logged("unpinned", nil) + agent.logged("released", nil); n != 0 {
		t.Errorf("the stopping agent logged %d unpins or releases", n)
	}
	for _, n := range names {
		if cri, hf := d.pinnedBy(t, n); !cri || !hf {
			t.Errorf("%s after the stop: CRI pin %v, holdfast pin %v; want both", n, cri, hf)
		}
	}
	if after := stopLeaseIDs(t, d); !slices.Equal(after, leasesBefore) {
		t.Errorf("holdfast leases after the stop %v, want %v", after, leasesBefore)
	}

	// Started again: ready, a full pass done, and nothing unpinned meanwhile.
	again := startAgent(t, d, dataDir, []string{imagesDir})
	eventually(t, "ready again", func() bool { code, _ := again.get(t, "/readyz"); return code == 200 })
	eventually(t, "the restarted agent's first pass to report as many pins", func() bool {
		r := stopReadReport(t, again)
		return r.Ready && r.Pinned == pinnedBefore
	})
	for _, ev := range w.flush(t) {
		if !slices.Contains(names, ev.Name) {
			continue
		}
		if ev.Kind == "delete" || !ev.pinned() {
			t.Errorf("image event %s %s %v: a pin was taken away across the restart", ev.Kind, ev.Name, ev.Labels)
		}
	}
	if n := again.logged("unpinned", nil) + again.logged("released", nil); n != 0 {
		t.Errorf("the restarted agent logged %d unpins or releases", n)
	}
	for _, ev := range stopReadReport(t, again).Events {
		if ev.Reason == "Unpinned" || ev.Reason == "Released" || strings.Contains(ev.Message, "stop/") {
			t.Errorf("journal event after the restart: %s %s", ev.Reason, ev.Message)
		}
	}
	d.requirePinned(t, names...)
	if after := stopLeaseIDs(t, d); !slices.Equal(after, leasesBefore) {
		t.Errorf("holdfast leases after the restart %v, want %v", after, leasesBefore)
	}
}

// TestRunEndsWhenItsContainerdDies: `holdfast run` on its embedded containerd
// (no --address) ends, with exit 1 and the cause, when that containerd is
// killed: the daemon's parts stop together, none is left waiting.
func TestRunEndsWhenItsContainerdDies(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	dir := tempDir(t)
	dataDir := filepath.Join(dir, "data")
	cmd := exec.Command(holdfastBin, "run", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--log-format", "json")
	var stderr testenv.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	var child int
	eventually(t, "the agent ready on its embedded containerd", func() bool {
		if !strings.Contains(stderr.String(), "ready: every source") {
			return false
		}
		child = childOf(t, cmd.Process.Pid)
		return child != 0
	})
	if err := syscall.Kill(child, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "the embedded containerd exited") {
			t.Errorf("run ended with %v; want exit 1 saying the embedded containerd exited\n%s", err, tail(stderr.String(), 10))
		}
	case <-time.After(time.Minute):
		t.Fatalf("run still runs a minute after its containerd was killed\n%s", tail(stderr.String(), 10))
	}
}

// childOf is the pid of a child process of pid (0 when it has none).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
		s := string(b)
		f := strings.Fields(s[strings.LastIndex(s, ")")+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			c, _ := strconv.Atoi(strings.Split(p, "/")[2])
			return c
		}
	}
	return 0
}

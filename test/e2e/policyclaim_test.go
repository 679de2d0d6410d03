package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/leases"

	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
)

// The claim on a namespace's signature policy, as containerd shows it: a
// lease of this ID labelled with the policy and its claimant, and the
// namespace's labels that copy it.
const (
	claimLeaseID  = "io.holdfast.policy"
	claimPolicy   = "io.holdfast.policy"
	claimPolicyBy = "io.holdfast.policy-by"
)

// TestPolicyClaimedOnce: two agents of different data dirs, started at the
// same instant on one namespace with different policies (enforce and warn):
// exactly one runs, the other exits 2 naming the first and its policy, and
// the survivor's policy is the one in force, on the claim and in the
// namespace's labels. 100 tries on the embedded containerd, 20 on Debian's
// 1.6. The agent of a data dir started again takes its own claim again, and
// the other is still refused.
func TestPolicyClaimedOnce(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		tries := 100
		if d.Name != "embedded" {
			tries = 20
		}
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		if err := os.MkdirAll(imagesDir, 0o755); err != nil {
			t.Fatal(err)
		}
		pols := claimPolicies(t, dir)
		good, failed := 0, 0
		for i := range tries {
			dataDirs := [2]string{filepath.Join(dir, fmt.Sprintf("a%d", i)), filepath.Join(dir, fmt.Sprintf("b%d", i))}
			if why := claimRace(t, d, imagesDir, dataDirs, pols); why != "" {
				t.Errorf("try %d: %s", i+1, why)
				if failed++; failed == 3 {
					t.Fatalf("stopped after 3 failed tries of %d (%d good)", i+1, good)
				}
			} else {
				good++
			}
			clearClaim(t, d)
		}
		t.Logf("%s: exactly one agent of two ran, with its policy in force, in %d of %d tries", d.Name, good, tries)

		// The same data dir again takes its own claim; the other is refused.
		dataDirs := [2]string{filepath.Join(dir, "again-a"), filepath.Join(dir, "again-b")}
		first := startClaimant(t, d, imagesDir, dataDirs[0], pols[0], nil)
		eventually(t, "the first agent's claim", func() bool { return claimBy(t, d) == dataDirs[0] })
		first.stop(t)
		again := startClaimant(t, d, imagesDir, dataDirs[0], pols[0], nil)
		other := startClaimant(t, d, imagesDir, dataDirs[1], pols[1], nil)
		if code, out := other.wait(t); code != 2 || !strings.Contains(out, "holdfast run, data dir "+dataDirs[0]) {
			t.Errorf("another agent beside one that took its claim again exited %d, want 2 naming it:\n%s", code, out)
		}
		if again.exited() {
			t.Errorf("the agent that took its own claim again exited:\n%s", again.output())
		}
		again.stop(t)
		clearClaim(t, d)
	})
}

// claimPolicies writes two policies that pass the ownership checks, one
// enforcing and one warning, trusting one key.
func claimPolicies(t *testing.T, dir string) [2]string {
	t.Helper()
	pub := filepath.Join(dir, "k.pub")
	if err := os.WriteFile(pub, sigtest.PublicPEM(t, sigtest.NewKey(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	var pols [2]string
	for i, mode := range []string{"enforce", "warn"} {
		pols[i] = filepath.Join(dir, mode+".yaml")
		body := "mode: " + mode + "\nrules:\n  - images: [\"*\"]\n    keys: [" + pub + "]\n"
		if err := os.WriteFile(pols[i], []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return pols
}

// claimRace starts an agent on each data dir with its policy, both released
// at once by one closed pipe, and says what went wrong ("" for nothing).
func claimRace(t *testing.T, d *daemon, imagesDir string, dataDirs, pols [2]string) string {
	t.Helper()
	gate, release, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var c [2]*claimant
	for j := range 2 {
		c[j] = startClaimant(t, d, imagesDir, dataDirs[j], pols[j], gate)
	}
	gate.Close()
	release.Close() // both shells read EOF at once and exec holdfast
	defer func() {
		for _, p := range c {
			p.stop(t)
		}
	}()
	// One exits, or both serve: each has passed the policy's claim by then.
	deadline := time.Now().Add(60 * time.Second)
	for !c[0].exited() && !c[1].exited() && !(c[0].serving() && c[1].serving()) {
		if time.Now().After(deadline) {
			return fmt.Sprintf("neither agent exited nor served within 60s:\n%s\n%s", c[0].output(), c[1].output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	loser := -1
	for j := range 2 {
		if c[j].exited() {
			loser = j
		}
	}
	if loser < 0 {
		return fmt.Sprintf("both agents run, with %s and %s; in force: %s by %s", pols[0], pols[1], claimPathOf(t, d), claimBy(t, d))
	}
	winner := 1 - loser
	code, out := c[loser].wait(t)
	if code != 2 || !strings.Contains(out, "holdfast run, data dir "+dataDirs[winner]) || !strings.Contains(out, pols[winner]) {
		return fmt.Sprintf("the agent of %s exited %d, want 2 naming the agent of %s and %s:\n%s", dataDirs[loser], code, dataDirs[winner], pols[winner], out)
	}
	var why string
	ok := waitFor(30*time.Second, func() bool {
		labels, err := d.Client.NamespaceService().Labels(d.ctx(), namespace)
		if err != nil {
			why = err.Error()
			return false
		}
		why = fmt.Sprintf("claim %s by %s, labels %s by %s", claimPathOf(t, d), claimBy(t, d), labels[claimPolicy], labels[claimPolicyBy])
		return claimPathOf(t, d) == pols[winner] && claimBy(t, d) == dataDirs[winner] &&
			labels[claimPolicy] == pols[winner] && labels[claimPolicyBy] == "holdfast run, data dir "+dataDirs[winner]
	})
	if !ok {
		return fmt.Sprintf("the survivor's policy %s is not the one in force: %s", pols[winner], why)
	}
	if c[winner].exited() {
		return fmt.Sprintf("the survivor, the agent of %s, exited too:\n%s", dataDirs[winner], c[winner].output())
	}
	return ""
}

// waitFor polls cond until it holds or limit passes.
func waitFor(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// claim reads the claim lease's labels (nil when there is none).
func claim(t *testing.T, d *daemon) map[string]string {
	t.Helper()
	ls, err := d.Client.LeasesService().List(d.ctx(), fmt.Sprintf("id==%q", claimLeaseID))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if l.ID == claimLeaseID {
			return l.Labels
		}
	}
	return nil
}

func claimPathOf(t *testing.T, d *daemon) string { return claim(t, d)[claimPolicy] }

// claimBy is the data dir of the agent that holds the claim.
func claimBy(t *testing.T, d *daemon) string {
	return strings.TrimPrefix(claim(t, d)[claimPolicyBy], "holdfast run, data dir ")
}

// clearClaim takes the claim and the namespace's policy labels away, as if
// no agent had put a policy in force.
func clearClaim(t *testing.T, d *daemon) {
	t.Helper()
	err := d.Client.LeasesService().Delete(d.ctx(), leases.Lease{ID: claimLeaseID})
	if err != nil && !strings.Contains(err.Error(), "not found") {
		t.Fatal(err)
	}
	for _, k := range []string{claimPolicy, claimPolicyBy} {
		if err := d.Client.NamespaceService().SetLabel(d.ctx(), namespace, k, ""); err != nil {
			t.Fatal(err)
		}
	}
}

// claimant is one `holdfast run` of the race.
type claimant struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func (c *claimant) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Write(p)
}

// startClaimant starts `holdfast run` on dataDir with policy. With a gate,
// a shell waits for the gate's end of file before it becomes holdfast.
func startClaimant(t *testing.T, d *daemon, imagesDir, dataDir, policy string, gate *os.File) *claimant {
	t.Helper()
	args := []string{"run", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir,
		"--listen", "127.0.0.1:0", "--settle", "1s", "--policy", policy}
	cmd := exec.Command(holdfastBin, args...)
	if gate != nil {
		cmd = exec.Command("sh", append([]string{"-c", `read -r _; exec "$0" "$@"`, holdfastBin}, args...)...)
		cmd.Stdin = gate
	}
	c := &claimant{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = c, c
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	t.Cleanup(func() { c.stop(t) })
	return c
}

func (c *claimant) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *claimant) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// serving says the agent serves HTTP: it passed the policy's claim.
func (c *claimant) serving() bool { return strings.Contains(c.output(), "serving /metrics") }

// wait waits for the exit and returns its code and output.
func (c *claimant) wait(t *testing.T) (int, string) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("holdfast run did not exit within 60s:\n%s", c.output())
	}
	var ee *exec.ExitError
	if errors.As(c.err, &ee) {
		return ee.ExitCode(), c.output()
	}
	return 0, c.output()
}

func (c *claimant) stop(t *testing.T) {
	if c.exited() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		t.Errorf("holdfast run did not stop within 30s of SIGTERM:\n%s", c.output())
	}
}

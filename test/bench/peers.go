package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/holdfast-project/holdfast/internal/embedded"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// spegelReadyTimeout bounds the wait for both spegels to find each other.
const spegelReadyTimeout = time.Minute

// peerPair is P8's two nodes on one machine, testenv's peer setup: a network
// namespace with one address per node on its loopback device, an embedded
// containerd per node (started in the namespace), a spegel per node
// bootstrapping from the other, node B's hosts.toml sending the image's
// registry to B's spegel (its upstream a closed port), and B's `holdfast run
// --pull-required` in the namespace.
type peerPair struct {
	ns      string
	a, b    *store
	aData   string       // A's holdfast data dir
	bToken  string       // B's agent's token file, which its reporter reads
	spegels []*agentProc // A's, B's
	agent   *agentProc   // B's holdfast run
	client  *http.Client // dials into the namespace
	undo    []func() error
}

// peersMissing says why P8 cannot run on this machine, or "" when it can.
func peersMissing() string {
	if os.Geteuid() != 0 {
		return "not root: P8 makes a network namespace"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "ip (iproute2) is not on PATH: P8 makes a network namespace with it"
	}
	if _, err := exec.LookPath("spegel"); err != nil {
		return "spegel is not on PATH (make deps builds it into bin/: scripts/spegel.sh)"
	}
	return ""
}

// startPeers starts the two nodes under dir, B mirroring registry through
// its spegel, and returns once both spegels have a peer and B's agent is
// ready. On an error, what was started is stopped.
func (h *harness) startPeers(ctx context.Context, dir, registry string) (p *peerPair, err error) {
	p = &peerPair{ns: fmt.Sprintf("holdfast-bench-%d", os.Getpid()), aData: filepath.Join(dir, "a", "holdfast")}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.stop())
			p = nil
		}
	}()
	addrs := []string{testenv.PeerNet + "1", testenv.PeerNet + "2"}
	remove, err := testenv.NewNetns(p.ns, addrs...)
	if err != nil {
		return p, err
	}
	p.undo = append(p.undo, remove)
	p.client = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: testenv.DialIn(p.ns)}}
	wrapper := filepath.Join(dir, "in-netns")
	if err := testenv.WriteNetnsWrapper(wrapper, p.ns, h.cfg.Tools.Holdfast); err != nil {
		return p, err
	}
	for i, node := range []string{"a", "b"} {
		st, err := startStoreWith(ctx, filepath.Join(dir, node, "containerd"), embedded.Options{Binary: wrapper})
		if err != nil {
			return p, fmt.Errorf("starting node %s's containerd: %w", node, err)
		}
		p.undo = append(p.undo, func() error { return st.stop(ctx) })
		if i == 0 {
			p.a = st
		} else {
			p.b = st
		}
		h.noteVersion(ctx, st)
	}
	spegel, _ := exec.LookPath("spegel")
	for i, st := range []*store{p.a, p.b} {
		l := st.proc.Layout()
		sp := testenv.Spegel{Addr: addrs[i], Peer: addrs[1-i], ContainerdSock: l.Address, Namespace: Namespace,
			ContentRoot: l.Root, DataDir: filepath.Join(dir, fmt.Sprint("spegel-", i))}
		s, err := startDaemon(ctx, "spegel at "+sp.Addr, filepath.Join(dir, fmt.Sprint("spegel-", i)), "ip",
			append([]string{"netns", "exec", p.ns, spegel}, sp.Args()...)...)
		if err != nil {
			return p, err
		}
		p.undo = append(p.undo, func() error { s.stop(); return nil })
		p.spegels = append(p.spegels, s)
	}
	if err := testenv.WriteMirror(p.b.proc.Layout().RegistryConfigPath, registry, addrs[1]); err != nil {
		return p, err
	}
	for i, s := range p.spegels {
		if err := p.waitSpegel(ctx, s, addrs[i]); err != nil {
			return p, err
		}
	}
	return p, p.startAgent(ctx, h.cfg.Tools.Holdfast, filepath.Join(dir, "b"))
}

// startAgent starts B's `holdfast run --pull-required` in the namespace,
// with B's hosts.toml, and waits until it is ready.
func (p *peerPair) startAgent(ctx context.Context, holdfast, dir string) error {
	images := filepath.Join(dir, "images")
	if err := os.MkdirAll(images, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", images, err)
	}
	logBase := filepath.Join(dir, "run")
	p.bToken = filepath.Join(dir, "holdfast", "token")
	a, err := startAgent(ctx, logBase, "ip", "netns", "exec", p.ns, holdfast,
		"run", "--address", p.b.Address(), "--write-path", WriteDirect, "--data-dir", filepath.Join(dir, "holdfast"),
		"--images", images, "--listen", "127.0.0.1:0", "--settle", "200ms",
		"--pull-required", "--registry-config", p.b.proc.Layout().RegistryConfigPath, "--pull-timeout", "2m")
	if err != nil {
		return err
	}
	a.client = p.client
	p.undo = append(p.undo, func() error { a.stop(); return nil })
	p.agent = a
	return a.waitReady(ctx, logBase+".err")
}

// waitSpegel waits until the spegel at addr answers /readyz with 200: its
// routing table holds a peer.
func (p *peerPair) waitSpegel(ctx context.Context, s *agentProc, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, spegelReadyTimeout)
	defer cancel()
	url := fmt.Sprintf("http://%s:%d/readyz", addr, testenv.SpegelRegistryPort)
	for {
		if err := s.alive(); err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := p.client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("spegel at %s found no peer within %s%s", addr, spegelReadyTimeout, logTail(s.logBase+".err"))
		}
	}
}

// require PUTs the required set naming ref to B's agent, as its reporter
// would: with the agent's token.
func (p *peerPair) require(ctx context.Context, ref string) error {
	body := fmt.Sprintf(`{"images":[{"ref":%q,"usedBy":["Deployment bench/app containers/app"]}]}`, ref)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+p.agent.addr+"/required", strings.NewReader(body))
	if err != nil {
		return err
	}
	token, err := os.ReadFile(p.bToken)
	if err != nil {
		return fmt.Errorf("PUT /required on B: reading the agent's token: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("PUT /required on B: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("PUT /required on B: %s", resp.Status)
	}
	return nil
}

// cpu is the CPU time so far of B's agent and both spegels (clients), and of
// both containerds.
func (p *peerPair) cpu() (clients, containerd time.Duration) {
	for _, c := range append([]*agentProc{p.agent}, p.spegels...) {
		if t, err := processCPU(c.cmd.Process.Pid); err == nil {
			clients += t
		}
	}
	for _, st := range []*store{p.a, p.b} {
		if t, err := st.cpu(); err == nil {
			containerd += t
		}
	}
	return clients, containerd
}

// stop stops what was started, the last first: B's agent, the spegels, the
// containerds, the namespace.
func (p *peerPair) stop() error {
	var errs []error
	for _, u := range slices.Backward(p.undo) {
		errs = append(errs, u())
	}
	p.undo = nil
	return errors.Join(errs...)
}

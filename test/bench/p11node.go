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
	"sync"
	"time"

	"github.com/holdfast-project/holdfast/internal/embedded"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// A simulated node: in its own network namespace an embedded containerd, a
// spegel (K3s's), `holdfast run --pull-required` and, when the ImageSet
// method runs, holdfast-reporter; its hosts.toml sends the image's registry
// to its spegel, the upstream a closed port (an air gap).
type simNode struct {
	i        int
	name     string // the Node's
	ns, addr string
	dir      string
	images   string // the agent's images dir
	token    string // the agent's token file
	st       *store
	spegel   *agentProc
	agent    *agentProc
	reporter *agentProc
	client   *http.Client // dials into the namespace
	undo     []func() error
}

func simNodeName(i int) string { return fmt.Sprintf("sim-%d", i) }

// simNodes are the n nodes of one sample, node 1 first.
type simNodes []*simNode

// startSimNodes starts n nodes under dir, mirroring registry through their
// spegels (each bootstraps from node 1, node 1 from node 2), and waits until
// every spegel has a peer and every agent is ready; with api, each node's
// reporter runs too, with reporterArgs. On an error what started is stopped.
func (h *harness) startSimNodes(ctx context.Context, dir string, n int, registry string, api *simAPI, reporterArgs []string) (nodes simNodes, err error) {
	defer func() {
		if err != nil {
			err = errors.Join(err, nodes.stop(ctx))
			nodes = nil
		}
	}()
	spegel, err := exec.LookPath("spegel")
	if err != nil {
		return nil, err
	}
	for i := 1; i <= n; i++ {
		nd := &simNode{i: i, name: simNodeName(i), ns: simNS(i), addr: simNodeAddr(i), dir: filepath.Join(dir, fmt.Sprint("n", i))}
		nd.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: testenv.DialIn(nd.ns)}}
		nodes = append(nodes, nd)
		peer := 1
		if i == 1 {
			peer = 2
		}
		if err := h.startSimStore(ctx, nd, spegel, simNodeAddr(peer), registry); err != nil {
			return nodes, fmt.Errorf("node %d: %w", i, err)
		}
	}
	for _, nd := range nodes {
		pp := &peerPair{client: nd.client}
		if err := pp.waitSpegel(ctx, nd.spegel, nd.addr); err != nil {
			return nodes, fmt.Errorf("node %d: %w", nd.i, err)
		}
	}
	for _, nd := range nodes {
		if err := nd.startAgent(ctx, h.cfg.Tools.Holdfast, registry); err != nil {
			return nodes, fmt.Errorf("node %d: %w", nd.i, err)
		}
	}
	if api == nil {
		return nodes, nil
	}
	reporter := filepath.Join(filepath.Dir(h.cfg.Tools.Holdfast), "holdfast-reporter")
	for _, nd := range nodes {
		if err := nd.startReporter(ctx, reporter, api.kubeconfig, reporterArgs); err != nil {
			return nodes, fmt.Errorf("node %d: %w", nd.i, err)
		}
	}
	return nodes, nil
}

// startSimStore starts the node's containerd in its namespace, its spegel
// bootstrapping from peer, and writes its hosts.toml for registry.
func (h *harness) startSimStore(ctx context.Context, nd *simNode, spegel, peer, registry string) error {
	if err := os.MkdirAll(nd.dir, 0o755); err != nil {
		return err
	}
	wrapper := filepath.Join(nd.dir, "in-netns")
	if err := testenv.WriteNetnsWrapper(wrapper, nd.ns, h.cfg.Tools.Holdfast); err != nil {
		return err
	}
	st, err := startStoreWith(ctx, filepath.Join(nd.dir, "containerd"), embedded.Options{Binary: wrapper})
	if err != nil {
		return fmt.Errorf("starting containerd: %w", err)
	}
	nd.undo = append(nd.undo, func() error { return st.stop(ctx) })
	nd.st = st
	h.noteVersion(ctx, st)
	l := st.proc.Layout()
	sp := testenv.Spegel{Addr: nd.addr, Peer: peer, ContainerdSock: l.Address, Namespace: Namespace,
		ContentRoot: l.Root, DataDir: filepath.Join(nd.dir, "spegel")}
	s, err := startDaemon(ctx, "spegel at "+nd.addr, filepath.Join(nd.dir, "spegel"), "ip",
		append([]string{"netns", "exec", nd.ns, spegel}, sp.Args()...)...)
	if err != nil {
		return err
	}
	nd.undo = append(nd.undo, func() error { s.stop(); return nil })
	nd.spegel = s
	return testenv.WriteMirror(l.RegistryConfigPath, registry, nd.addr)
}

// startAgent starts the node's `holdfast run --pull-required` and waits
// until it is ready. Its --peer-mirror is its spegel, as the chart gives
// it, for registry only: the agent keeps the hosts.toml startSimStore
// wrote (not its own), and names its spegel in its report, where the waves
// send other nodes to fetch what it holds.
func (nd *simNode) startAgent(ctx context.Context, holdfast, registry string) error {
	nd.images = filepath.Join(nd.dir, "images")
	if err := os.MkdirAll(nd.images, 0o755); err != nil {
		return err
	}
	data := filepath.Join(nd.dir, "holdfast")
	nd.token = filepath.Join(data, "token")
	logBase := filepath.Join(nd.dir, "run")
	a, err := startAgent(ctx, logBase, "ip", "netns", "exec", nd.ns, holdfast,
		"run", "--address", nd.st.Address(), "--write-path", WriteDirect, "--data-dir", data,
		"--images", nd.images, "--listen", "127.0.0.1:0", "--settle", "200ms",
		"--pull-required", "--registry-config", nd.st.proc.Layout().RegistryConfigPath, "--pull-timeout", "5m",
		"--peer-mirror", fmt.Sprintf("http://%s:%d", nd.addr, testenv.SpegelRegistryPort), "--peer-registries", registry)
	if err != nil {
		return err
	}
	a.client = nd.client
	nd.undo = append(nd.undo, func() error { a.stop(); return nil })
	nd.agent = a
	return a.waitReady(ctx, logBase+".err")
}

// startReporter starts the node's holdfast-reporter, reading the agent.
func (nd *simNode) startReporter(ctx context.Context, bin, kubeconfig string, extra []string) error {
	args := append([]string{"netns", "exec", nd.ns, bin, "--agent", "http://" + nd.agent.addr,
		"--kubeconfig", kubeconfig, "--node", nd.name, "--token-file", nd.token}, extra...)
	r, err := startDaemon(ctx, "holdfast-reporter of "+nd.name, filepath.Join(nd.dir, "reporter"), "ip", args...)
	if err != nil {
		return err
	}
	nd.undo = append(nd.undo, func() error { r.stop(); return nil })
	nd.reporter = r
	return nil
}

// require PUTs the required set naming ref to the node's agent, as its
// reporter would, with the agent's token.
func (nd *simNode) require(ctx context.Context, ref string) error {
	pp := &peerPair{client: nd.client, agent: nd.agent, bToken: nd.token}
	if err := pp.require(ctx, ref); err != nil {
		return fmt.Errorf("%s: %w", nd.name, err)
	}
	return nil
}

// alive is an error naming the first of the node's processes that exited.
func (nd *simNode) alive() error {
	for _, p := range []*agentProc{nd.spegel, nd.agent, nd.reporter} {
		if p == nil {
			continue
		}
		if err := p.alive(); err != nil {
			return fmt.Errorf("%s: %w", nd.name, err)
		}
	}
	return nil
}

// stop stops every node's processes, the last started first.
func (ns simNodes) stop(ctx context.Context) error {
	var errs []error
	for _, nd := range slices.Backward(ns) {
		for _, u := range slices.Backward(nd.undo) {
			errs = append(errs, u())
		}
		nd.undo = nil
	}
	return errors.Join(errs...)
}

// alive is an error naming the first process of any node that exited.
func (ns simNodes) alive() error {
	for _, nd := range ns {
		if err := nd.alive(); err != nil {
			return err
		}
	}
	return nil
}

// waitAllPinned waits until every node holds name pinned and returns when
// the last did.
func (ns simNodes) waitAllPinned(ctx context.Context, name string, timeout time.Duration) (time.Time, error) {
	var (
		mu   sync.Mutex
		last time.Time
		errs []error
		wg   sync.WaitGroup
	)
	for _, nd := range ns {
		wg.Go(func() {
			w := newPinWatcher(ctx, nd.st)
			defer w.close()
			at, err := w.waitPinned(ctx, name, timeout)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", nd.name, err))
			} else if at.After(last) {
				last = at
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return last, fmt.Errorf("%w%s", err, ns.notes())
	}
	return last, nil
}

// notes is the tail of each agent's log, for an error.
func (ns simNodes) notes() string {
	var b strings.Builder
	for _, nd := range ns {
		if nd.agent != nil {
			if t := logTail(nd.agent.logBase + ".err"); t != "" {
				fmt.Fprintf(&b, "\n%s's agent%s", nd.name, t)
			}
		}
	}
	return b.String()
}

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

// P11's network: a Linux bridge in the root network namespace and one
// namespace per simulated node, each joined to the bridge by a veth pair
// whose two ends are shaped with tc (a token bucket) to one rate, so that
// what a node sends and what it receives are each bound by the rate, as on
// a node's link. Every name starts with simPrefix: a run killed before its
// clean-up leaves things the next run finds and removes.
const (
	simPrefix     = "hfsim"
	simBridge     = simPrefix + "0"
	simNet        = "10.79.0."
	simBridgeAddr = simNet + "1"
	// simTBFBurst and simTBFLatency are the token bucket's: a burst that
	// holds a few segments of veth's 64 KiB offload, a queue of at most
	// 100 ms at the rate.
	simTBFBurst   = "256kb"
	simTBFLatency = "100ms"
	// simRatePort is where the link check's receiver listens.
	simRatePort = 7079
)

func simNS(i int) string       { return fmt.Sprintf("%s-%d", simPrefix, i) }
func simHostLink(i int) string { return fmt.Sprintf("%s-h%d", simPrefix, i) }
func simNodeLink(i int) string { return fmt.Sprintf("%s-n%d", simPrefix, i) }
func simNodeAddr(i int) string { return simNet + strconv.Itoa(10+i) }

// simNetwork is the bridge and n nodes' namespaces, nodes numbered from 1.
type simNetwork struct {
	n        int
	rateMbit int
	undo     []func() error
}

func simRun(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newSimNetwork makes the bridge at simBridgeAddr/24 and n namespaces, node
// i at simNodeAddr(i)/24 on its end of a veth pair, both ends shaped to
// rateMbit. On an error what was made is removed.
func newSimNetwork(n, rateMbit int) (w *simNetwork, err error) {
	w = &simNetwork{n: n, rateMbit: rateMbit}
	defer func() {
		if err != nil {
			err = errors.Join(err, w.remove())
		}
	}()
	for _, s := range [][]string{
		{"link", "add", simBridge, "type", "bridge"},
		{"addr", "add", simBridgeAddr + "/24", "dev", simBridge},
		{"link", "set", simBridge, "up"},
	} {
		if err := simRun("ip", s...); err != nil {
			return w, fmt.Errorf("making the bridge: %w", err)
		}
		if s[1] == "add" && s[0] == "link" {
			w.undo = append(w.undo, func() error { return simRun("ip", "link", "del", simBridge) })
		}
	}
	rate := fmt.Sprintf("%dmbit", rateMbit)
	for i := 1; i <= n; i++ {
		ns, host, node := simNS(i), simHostLink(i), simNodeLink(i)
		if err := simRun("ip", "netns", "add", ns); err != nil {
			return w, err
		}
		w.undo = append(w.undo, func() error { return simRun("ip", "netns", "delete", ns) })
		steps := [][]string{
			{"ip", "-n", ns, "link", "set", "lo", "up"},
			{"ip", "link", "add", host, "type", "veth", "peer", "name", node, "netns", ns},
			{"ip", "link", "set", host, "master", simBridge, "up"},
			{"ip", "-n", ns, "addr", "add", simNodeAddr(i) + "/24", "dev", node},
			{"ip", "-n", ns, "link", "set", node, "up"},
			{"tc", "qdisc", "add", "dev", host, "root", "tbf", "rate", rate, "burst", simTBFBurst, "latency", simTBFLatency},
			{"ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", node, "root", "tbf", "rate", rate, "burst", simTBFBurst, "latency", simTBFLatency},
			// What the node's registry (its spegel) sends on its link, counted by nftables: see served.
			{"ip", "netns", "exec", ns, "nft", "add", "table", "inet", simPrefix},
			{"ip", "netns", "exec", ns, "nft", "add", "counter", "inet", simPrefix, "served"},
			{"ip", "netns", "exec", ns, "nft", "add", "chain", "inet", simPrefix, "out", "{ type filter hook output priority 0 ; }"},
			{"ip", "netns", "exec", ns, "nft", "add", "rule", "inet", simPrefix, "out", "oifname", node, "tcp", "sport",
				strconv.Itoa(testenv.SpegelRegistryPort), "counter", "name", "served"},
		}
		for _, s := range steps {
			if err := simRun(s[0], s[1:]...); err != nil {
				return w, fmt.Errorf("making node %d's link: %w", i, err)
			}
		}
	}
	return w, nil
}

// remove deletes the namespaces (their veth pairs go with them) and the
// bridge.
func (w *simNetwork) remove() error {
	var errs []error
	for _, u := range slices.Backward(w.undo) {
		errs = append(errs, u())
	}
	w.undo = nil
	return errors.Join(errs...)
}

// simHeaderBytes are an IPv4 and a TCP header with timestamps, as each
// segment (or offloaded run of segments) of a connection carries them.
const simHeaderBytes = 20 + 20 + 12

// served is what node i's registry (its spegel, the only server on
// testenv.SpegelRegistryPort) has sent its peers so far, as TCP payload:
// the bytes and packets nftables counted leaving its link from that port,
// less a header per packet (the connection's opening reply carries a few
// option bytes more). The payload is the HTTP responses, headers and
// blobs, retransmissions counted again; the node's other traffic (the API
// server, spegel's routing) is not in it.
func (w *simNetwork) served(i int) (int64, error) {
	out, err := exec.Command("ip", "netns", "exec", simNS(i), "nft", "-j", "list", "counter", "inet", simPrefix, "served").Output()
	if err != nil {
		return 0, fmt.Errorf("nft list counter in %s: %w", simNS(i), err)
	}
	var list struct {
		Nftables []struct {
			Counter *struct {
				Packets int64 `json:"packets"`
				Bytes   int64 `json:"bytes"`
			} `json:"counter"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		return 0, fmt.Errorf("nft list counter in %s: %w", simNS(i), err)
	}
	for _, e := range list.Nftables {
		if c := e.Counter; c != nil {
			return c.Bytes - simHeaderBytes*c.Packets, nil
		}
	}
	return 0, fmt.Errorf("nft list counter in %s: no counter in %s", simNS(i), out)
}

// servedAll is served of every node, node 1 first.
func (w *simNetwork) servedAll() ([]int64, error) {
	out := make([]int64, w.n)
	for i := range out {
		v, err := w.served(i + 1)
		if err != nil {
			return nil, fmt.Errorf("reading node %d's counters: %w", i+1, err)
		}
		out[i] = v
	}
	return out, nil
}

// measureLink sends size bytes over TCP from node 1 to node 2 and returns
// the rate the receiver saw, in bits per second: through node 1's shaped
// end, the bridge, and node 2's shaped end.
func (w *simNetwork) measureLink(ctx context.Context, size int64) (float64, error) {
	if w.n < 2 {
		return 0, errors.New("the link check needs two nodes")
	}
	addr := net.JoinHostPort(simNodeAddr(2), strconv.Itoa(simRatePort))
	var l net.Listener
	if err := inNetns(simNS(2), func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		return 0, fmt.Errorf("listening in node 2: %w", err)
	}
	defer l.Close()
	type got struct {
		n   int64
		at  time.Time
		err error
	}
	ch := make(chan got, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			ch <- got{err: err}
			return
		}
		defer c.Close()
		n, err := io.Copy(io.Discard, c)
		ch <- got{n, time.Now(), err}
	}()
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c, err := testenv.DialIn(simNS(1))(dctx, "tcp", addr)
	if err != nil {
		return 0, fmt.Errorf("dialing node 2 from node 1: %w", err)
	}
	buf := make([]byte, 1<<20)
	start := time.Now()
	_ = c.SetWriteDeadline(start.Add(time.Minute))
	for sent := int64(0); sent < size; sent += int64(len(buf)) {
		if _, err := c.Write(buf[:min(int64(len(buf)), size-sent)]); err != nil {
			c.Close()
			return 0, fmt.Errorf("sending to node 2: %w", err)
		}
	}
	c.Close()
	r := <-ch
	if r.err != nil {
		return 0, fmt.Errorf("receiving on node 2: %w", r.err)
	}
	if r.n != size {
		return 0, fmt.Errorf("node 2 received %d bytes of %d", r.n, size)
	}
	return float64(size*8) / r.at.Sub(start).Seconds(), nil
}

// inNetns runs f on a thread in the network namespace ns; sockets f makes
// stay in ns. A thread that cannot come back ends with its goroutine.
func inNetns(ns string, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer home.Close()
		target, err := os.Open(filepath.Join("/run/netns", ns))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("entering network namespace %s: %w", ns, err)
			return
		}
		ch <- f()
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	return <-ch
}

// removeSimLeftovers removes what a killed run left: the processes it
// recorded in dir's pid file (those whose command line still names dir),
// the processes in namespaces of simPrefix and those namespaces, links of
// simPrefix in the root namespace, mounts under dir, and dir unless keep.
func removeSimLeftovers(dir string, keep bool) error {
	var errs []error
	killRecorded(dir)
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), simPrefix+"-") {
			continue
		}
		if out, err := exec.Command("ip", "netns", "pids", e.Name()).Output(); err == nil {
			for _, f := range strings.Fields(string(out)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		errs = append(errs, simRun("ip", "netns", "delete", e.Name()))
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		if strings.HasPrefix(l.Name(), simPrefix) {
			errs = append(errs, simRun("ip", "link", "del", l.Name()))
		}
	}
	errs = append(errs, unmountUnder(dir))
	if !keep {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", dir, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing what an earlier P11 run left: %w", err)
	}
	return nil
}

// simPidFile lists, one a line, the processes a run started in the root
// namespace (etcd, kube-apiserver).
func simPidFile(dir string) string { return filepath.Join(dir, "pids") }

func recordPid(dir string, pid int) error {
	f, err := os.OpenFile(simPidFile(dir), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, pid)
	return errors.Join(err, f.Close())
}

// killRecorded kills the recorded processes still running whose command
// line names dir: a pid reused by another process is left alone.
func killRecorded(dir string) {
	b, err := os.ReadFile(simPidFile(dir))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 1 {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(cmdline), dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Two or more nodes on one machine, for the peer tests and the bench: each a
// containerd and a spegel (K3s's fork, the one K3s embeds) in a network
// namespace made for the purpose, with one address per node on its loopback
// device. spegel advertises no loopback address (127/8) and assumes every
// peer serves its registry on the same port, so each node gets an address of
// its own in PeerNet; nothing leaves the namespace. A node that pulls through
// its spegel has a hosts.toml whose upstream is a closed port: only a peer
// can serve it.

// PeerNet is the prefix of the nodes' addresses: PeerNet+"1", PeerNet+"2".
const PeerNet = "10.77.0."

// The ports every node's spegel listens on, at its own address.
const (
	SpegelRegistryPort  = 5000
	SpegelRouterPort    = 5001
	SpegelBootstrapPort = 5002
	SpegelMetricsPort   = 9090
)

// ClosedUpstream is the upstream of a mirrored registry: a port no one
// serves.
const ClosedUpstream = "http://127.0.0.1:9"

// NewNetns makes the network namespace name (ip netns add), sets its
// loopback device up and puts addrs on it (each a /32). remove deletes it.
// A name ending in -<pid> is a run's own: the namespaces of the same prefix
// that runs now gone left behind (killed before their cleanup) and that no
// process is in are deleted first.
func NewNetns(name string, addrs ...string) (remove func() error, err error) {
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("making network namespace %s: ip (iproute2) is not on PATH: %w", name, err)
	}
	run := func(args ...string) error {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if prefix, _, ok := cutPID(name); ok {
		entries, _ := os.ReadDir("/run/netns")
		for _, e := range entries {
			p, pid, ok := cutPID(e.Name())
			if !ok || p != prefix || e.Name() == name {
				continue
			}
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				continue // its run goes on
			}
			if out, err := exec.Command("ip", "netns", "pids", e.Name()).Output(); err == nil && strings.TrimSpace(string(out)) == "" {
				_ = run("netns", "delete", e.Name())
			}
		}
	}
	if err := run("netns", "add", name); err != nil {
		return nil, fmt.Errorf("making network namespace %s: %w", name, err)
	}
	remove = func() error { return run("netns", "delete", name) }
	steps := [][]string{{"-n", name, "link", "set", "lo", "up"}}
	for _, a := range addrs {
		steps = append(steps, []string{"-n", name, "addr", "add", a + "/32", "dev", "lo"})
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			return nil, fmt.Errorf("making network namespace %s: %w", name, errors.Join(err, remove()))
		}
	}
	return remove, nil
}

// cutPID splits a namespace name <prefix>-<pid>.
func cutPID(name string) (prefix string, pid int, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return "", 0, false
	}
	pid, err := strconv.Atoi(name[i+1:])
	if err != nil || pid <= 0 {
		return "", 0, false
	}
	return name[:i], pid, true
}

// WriteNetnsWrapper writes an executable script at path that runs bin, with
// the script's arguments, in namespace ns: given as the binary of an embedded
// containerd, it puts that containerd in ns (its pulls, the transfer
// service's and the CRI's, go out from there).
func WriteNetnsWrapper(path, ns, bin string) error {
	script := fmt.Sprintf("#!/bin/sh\nexec ip netns exec %s %s \"$@\"\n", ns, bin)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		return fmt.Errorf("writing the wrapper %s: %w", path, err)
	}
	return nil
}

// Spegel is one node's spegel.
type Spegel struct {
	Addr, Peer     string // its address, and the address of the peer it bootstraps from
	ContainerdSock string
	Namespace      string // containerd's
	ContentRoot    string // containerd's root: the content store is under it
	DataDir        string // spegel's own
}

// Args is the command line of spegel's registry for the node, after the
// binary: debug logging, the node's containerd, every port at the node's
// address, and HTTP bootstrap from Peer (each serves its own address and ID,
// so either may come up first).
func (s Spegel) Args() []string {
	at := func(port int) string { return fmt.Sprintf("%s:%d", s.Addr, port) }
	return []string{"registry",
		"--log-level", "DEBUG",
		"--containerd-sock", s.ContainerdSock,
		"--containerd-namespace", s.Namespace,
		"--containerd-content-path", filepath.Join(s.ContentRoot, "io.containerd.content.v1.content"),
		"--data-dir", s.DataDir,
		"--registry-addr", at(SpegelRegistryPort),
		"--router-addr", at(SpegelRouterPort),
		"--metrics-addr", at(SpegelMetricsPort),
		"--bootstrap-kind", "http",
		"--http-bootstrap-addr", at(SpegelBootstrapPort),
		"--http-bootstrap-peer", fmt.Sprintf("http://%s:%d", s.Peer, SpegelBootstrapPort),
	}
}

// WriteMirror writes the node's hosts.toml for registry under hostsDir
// (containerd's certs.d layout): the spegel at addr first, then
// ClosedUpstream, so that only a peer can serve the node.
func WriteMirror(hostsDir, registry, addr string) error {
	dir := filepath.Join(hostsDir, registry)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("writing the mirror of %s: %w", registry, err)
	}
	mirror := fmt.Sprintf("http://%s:%d", addr, SpegelRegistryPort)
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", ClosedUpstream, mirror)
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		return fmt.Errorf("writing the mirror of %s: %w", registry, err)
	}
	return nil
}

// DialIn dials in the network namespace ns, from a thread that enters ns
// and comes back; the connection stays in ns. A thread that cannot come
// back is not used again: its goroutine ends locked to it, and the Go
// runtime ends the thread (which kills the processes it started with a
// parent-death signal: the containerds and spegels are started by others).
func DialIn(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type dialed struct {
			c   net.Conn
			err error
		}
		ch := make(chan dialed, 1)
		go func() {
			runtime.LockOSThread()
			home, err := os.Open("/proc/thread-self/ns/net")
			if err != nil {
				runtime.UnlockOSThread()
				ch <- dialed{err: err}
				return
			}
			defer home.Close()
			f, err := os.Open(filepath.Join("/run/netns", ns))
			if err != nil {
				runtime.UnlockOSThread()
				ch <- dialed{err: err}
				return
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				runtime.UnlockOSThread()
				ch <- dialed{err: fmt.Errorf("entering network namespace %s: %w", ns, err)}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			ch <- dialed{c, err}
			if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
				runtime.UnlockOSThread()
			}
		}()
		r := <-ch
		return r.c, r.err
	}
}

package cluster

// A second node: its own network namespace (a veth to the host, where the API server listens), its own
// mount namespace in it, in which node 2's directories are bind-mounted over node 1's paths, so that the
// same containerd config, the same chart values and the same hostPaths mean node 2's own files there; its
// containerd, kubelet (its pods under a cgroup root of their own) and kube-proxy.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	node2Name    = "holdfast-test-node-2"
	node2IP      = "10.250.1.2"
	node2Gateway = "10.250.1.1" // the host's end of the veth
	node2PodCIDR = "10.244.1.0/24"
	node2Bridge  = "hftest1"
	node2Netns   = "holdfast-test-node-2"
	node2Veth    = "hfnode2"
	node2Cgroup  = "holdfast-test-node-2" // the cgroup root of its kubelet: node 1's kubelet owns /kubepods
)

// node2Shadows are the cluster dirs that node 2 has its own of, at the same paths.
var node2Shadows = []string{"containerd", "run", "cni", "kubelet", "holdfast-data", "holdfast-cli", "test-images"}

// node2 is the second node.
type node2 struct {
	c        *cluster
	dir      string // node 2's own dirs, seen at node 1's paths inside its mount namespace
	ns       *proc  // holds its mount namespace, inside its network namespace
	procs    map[string]*proc
	cleanups []func() error
}

// path is where node 1's path p (under the cluster dir) is node 2's, seen from the host.
func (n *node2) path(p string) string {
	rel, err := filepath.Rel(n.c.dir, p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return p
	}
	return filepath.Join(n.dir, rel)
}

// sock is node 2's containerd socket, seen from the host.
func (n *node2) sock() string { return n.path(n.c.sock) }

// addNode2 starts the second node and waits until it is Ready. stop undoes it all.
func (c *cluster) addNode2() (n *node2, err error) {
	n = &node2{c: c, dir: filepath.Join(c.dir, "node2"), procs: map[string]*proc{}}
	// A node of its own each time: nothing left from a node 2 before.
	if err := os.RemoveAll(n.dir); err != nil {
		return n, err
	}
	n.defer_(func() error { return os.RemoveAll(n.dir) }) // last: once nothing runs in it
	defer func() {
		if err != nil {
			err = errors.Join(err, n.stop())
		}
	}()
	for _, step := range []struct {
		what string
		f    func() error
	}{
		{"node 2's network", n.network},
		{"node 2's mount namespace", n.namespace},
		{"node 2's containerd", n.containerd},
		{"node 2's pause image", n.importPause},
		{"node 2's kubelet", n.kubelet},
		{"node 2's kube-proxy", n.proxy},
	} {
		if err := c.timed(step.what, step.f); err != nil {
			return n, err
		}
	}
	return n, nil
}

func (n *node2) defer_(f func() error) { n.cleanups = append(n.cleanups, f) }

// stop stops node 2 and removes what it made, in reverse order.
func (n *node2) stop() error {
	var errs []error
	for i := len(n.cleanups) - 1; i >= 0; i-- {
		errs = append(errs, n.cleanups[i]())
	}
	n.cleanups = nil
	return errors.Join(errs...)
}

// network makes node 2's network namespace and the veth to the host: node 2 at 10.250.1.2, the host at
// 10.250.1.1, node 2's pods routed through it. A namespace a killed run left behind is removed first.
func (n *node2) network() error {
	if _, err := run("ip", "netns", "pids", node2Netns); err == nil {
		_, _ = run("ip", "netns", "delete", node2Netns)
	}
	if _, err := run("ip", "link", "show", node2Veth); err == nil {
		_, _ = run("ip", "link", "del", node2Veth)
	}
	steps := [][]string{
		{"ip", "netns", "add", node2Netns},
		{"ip", "link", "add", node2Veth, "type", "veth", "peer", "name", "eth0", "netns", node2Netns},
		{"ip", "addr", "add", node2Gateway + "/30", "dev", node2Veth},
		{"ip", "link", "set", node2Veth, "up"},
		{"ip", "-n", node2Netns, "link", "set", "lo", "up"},
		{"ip", "-n", node2Netns, "addr", "add", node2IP + "/30", "dev", "eth0"},
		{"ip", "-n", node2Netns, "link", "set", "eth0", "up"},
		{"ip", "-n", node2Netns, "route", "add", "default", "via", node2Gateway},
		{"ip", "netns", "exec", node2Netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"ip", "route", "add", node2PodCIDR, "via", node2IP},
	}
	n.defer_(func() error {
		_, _ = run("ip", "route", "del", node2PodCIDR)
		_, err := run("ip", "netns", "delete", node2Netns) // the veth goes with it
		return err
	})
	for _, s := range steps {
		if _, err := run(s...); err != nil {
			return err
		}
	}
	return nil
}

// namespace starts the process that holds node 2's mount namespace: node 1's tmpfs mounts, then node 2's
// dirs bound over node 1's.
func (n *node2) namespace() error {
	script := strings.TrimSuffix(nsScript, "echo ready\nexec sleep 2147483647\n")
	for _, d := range node2Shadows {
		own, shadowed := filepath.Join(n.dir, d), filepath.Join(n.c.dir, d)
		for _, p := range []string{own, shadowed} {
			if err := os.MkdirAll(p, 0o711); err != nil {
				return err
			}
		}
		script += fmt.Sprintf("mount --bind %q %q\n", own, shadowed)
	}
	script += "echo ready\nexec sleep 2147483647\n"
	// nsenter, not `ip netns exec`: that mounts a sysfs of its own on /sys, which hides the cgroup mounts.
	cmd := exec.Command("nsenter", "--net=/run/netns/"+node2Netns, "--", "unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script)
	out, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer out.Close()
	cmd.Stdout = w
	p, err := startProcWith(cmd, "node 2's namespace", n.c.logPath("node2-namespace"))
	w.Close()
	if err != nil {
		return err
	}
	n.ns = p
	n.defer_(func() error { return killNamespace(p) })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		<-p.done
		return fmt.Errorf("making node 2's mount namespace: %v (%q); log:\n%s", err, line, p.tail(20))
	}
	return nil
}

// in starts a component of node 2 in its mount and network namespaces.
func (n *node2) in(name string, argv ...string) (*proc, error) {
	pid := strconv.Itoa(n.ns.cmd.Process.Pid)
	full := append([]string{"nsenter", "--mount=/proc/" + pid + "/ns/mnt", "--net=/proc/" + pid + "/ns/net", "--"}, argv...)
	p, err := startProc(name, n.c.logPath(strings.ReplaceAll(name, " ", "-")), n.c.env(), full...)
	if err != nil {
		return nil, err
	}
	n.procs[name] = p
	return p, nil
}

// containerd starts node 2's containerd with node 1's config: its paths are node 2's dirs in there.
func (n *node2) containerd() error {
	c := n.c
	d := filepath.Join(c.dir, "containerd")
	for _, sub := range []string{"root", "state", "tmp", "opt", "certs.d"} {
		if err := os.MkdirAll(n.path(filepath.Join(d, sub)), 0o711); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(n.path(c.cniConfDir()), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.path(c.cniConfDir()), "10-holdfast-test.conflist"), []byte(cniConfigFor(node2Bridge, node2PodCIDR)), 0o644); err != nil {
		return err
	}
	cfg := filepath.Join(d, "config.toml")
	if err := os.WriteFile(n.path(cfg), []byte(c.containerdConfig()), 0o600); err != nil {
		return err
	}
	n.defer_(func() error { return removeCgroupTrees(node2Cgroup) })
	if err := makeCgroupTrees(node2Cgroup); err != nil {
		return fmt.Errorf("node 2's cgroup root: %w", err)
	}
	p, err := n.in("node2 containerd", filepath.Join(c.repoBin, "holdfast-containerd"), "containerd", "--config", cfg)
	if err != nil {
		return err
	}
	n.defer_(func() error {
		_, rmErr := n.crictl("rmp", "-fa")
		return errors.Join(rmErr, p.stop(15*time.Second))
	})
	return waitFor("node 2's containerd to answer", time.Minute, func() (bool, error) {
		_, err := n.crictl("version")
		return err == nil, err
	}, p)
}

// crictl runs crictl against node 2's containerd.
func (n *node2) crictl(args ...string) (string, error) {
	argv := append([]string{filepath.Join(n.c.repoBin, "crictl"), "--runtime-endpoint", "unix://" + n.sock(),
		"--image-endpoint", "unix://" + n.sock(), "--timeout", "30s"}, args...)
	return run(argv...)
}

// holdfast runs the holdfast CLI against node 2's containerd.
func (n *node2) holdfast(args ...string) (string, error) {
	argv := append([]string{filepath.Join(n.c.repoBin, "holdfast")}, args...)
	argv = append(argv, "--address", n.sock(), "--data-dir", n.path(filepath.Join(n.c.dir, "holdfast-cli")))
	return run(argv...)
}

// importPause pins the pause image on node 2: its archive copied into node 2's own images dir.
func (n *node2) importPause() error {
	dir := n.path(n.c.imagesDir)
	if err := copyFile(filepath.Join(n.c.imagesDir, "pause.tar"), filepath.Join(dir, "pause.tar")); err != nil {
		return err
	}
	_, err := n.holdfast("sync", "--images", dir)
	return err
}

// kubelet starts node 2's kubelet: node 1's config but for its address, certificates, pod range and
// cgroup root; and waits until node 2 is Ready.
func (n *node2) kubelet() error {
	c := n.c
	p := c.pki
	for i, s := range []certSpec{
		{name: "kubelet-2", cn: "system:node:" + node2Name, orgs: []string{"system:nodes"}},
		{name: "kubelet-2-serving", cn: node2Name, server: true, ips: []net.IP{net.ParseIP(node2IP)}, dns: []string{node2Name}},
	} {
		if err := p.issue(s, int64(100+i)); err != nil {
			return fmt.Errorf("issuing the %s certificate: %w", s.name, err)
		}
	}
	if _, err := p.kubeconfig("kubelet-2", fmt.Sprintf("https://%s:%d", nodeIP, apiPort)); err != nil {
		return err
	}
	cfg := c.defaultKubeletConfig()
	cfg["address"], cfg["healthzBindAddress"] = node2IP, node2IP
	cfg["tlsCertFile"], cfg["tlsPrivateKeyFile"] = p.path("kubelet-2-serving.crt"), p.path("kubelet-2-serving.key")
	cfg["podCIDR"] = node2PodCIDR
	cfg["cgroupRoot"] = "/" + node2Cgroup
	b, err := jsonIndent(cfg)
	if err != nil {
		return err
	}
	file := filepath.Join(n.dir, "kubelet-config.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return err
	}
	k, err := n.in("node2 kubelet", filepath.Join(c.k8sBin, "kubelet"),
		"--config", file,
		"--kubeconfig", p.path("kubelet-2.kubeconfig"),
		"--root-dir", filepath.Join(c.dir, "kubelet"),
		"--cert-dir", filepath.Join(c.dir, "kubelet", "pki"),
		"--hostname-override", node2Name, "--node-ip", node2IP,
		"--v", "2")
	if err != nil {
		return err
	}
	n.defer_(func() error {
		err := k.stop(10 * time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if derr := c.client.CoreV1().Nodes().Delete(ctx, node2Name, metav1.DeleteOptions{}); derr != nil {
			err = errors.Join(err, derr)
		}
		return err
	})
	return waitFor("node "+node2Name+" Ready", 2*time.Minute, func() (bool, error) {
		return c.readyNode(node2Name)
	}, k, n.procs["node2 containerd"])
}

// proxy starts kube-proxy for node 2 in its network namespace (its nftables tables go with it).
func (n *node2) proxy() error {
	c := n.c
	cfg := c.proxyConfig(node2Name, node2IP, node2PodCIDR)
	file := filepath.Join(n.dir, "kube-proxy.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		return err
	}
	p, err := n.in("node2 kube-proxy", filepath.Join(c.k8sBin, "kube-proxy"), "--config", file)
	if err != nil {
		return err
	}
	n.defer_(func() error { return p.stop(10 * time.Second) })
	return waitProxy(p, "ip", "netns", "exec", node2Netns, "nft")
}

// makeCgroupTrees makes the cgroup name below the root of every cgroup v1 hierarchy (and of cgroup v2's).
func makeCgroupTrees(name string) error {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	roots = append(roots, "/sys/fs/cgroup")
	for _, root := range roots {
		if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
			continue // not a hierarchy's root (a file, or cgroup v1's tmpfs)
		}
		if err := os.Mkdir(filepath.Join(root, name), 0o755); err != nil && !os.IsExist(err) {
			return err
		}
	}
	return nil
}

// killNamespace kills what is left in the mount namespace p holds, by PID, then p.
func killNamespace(p *proc) error {
	if p.exited() {
		return nil
	}
	own, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", p.cmd.Process.Pid))
	if err == nil {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == p.cmd.Process.Pid {
				continue
			}
			if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && l == own {
				if proc, err := os.FindProcess(pid); err == nil {
					_ = proc.Kill()
				}
			}
		}
	}
	return p.stop(5 * time.Second)
}

// readyNode says whether the node name is Ready, and if not, why.
func (c *cluster) readyNode(name string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	node, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			if cond.Status == corev1.ConditionTrue {
				return true, nil
			}
			return false, fmt.Errorf("node %s: Ready=%s %s: %s", name, cond.Status, cond.Reason, cond.Message)
		}
	}
	return false, fmt.Errorf("node %s has no Ready condition yet", name)
}

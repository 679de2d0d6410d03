package cluster

// The node: its private mount namespace, containerd (with the CRI, runc and CNI) and the kubelet.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// nsScript makes the node's private mount namespace: tmpfs on /run, /var/lib and /var/log with the fixed
// paths the kubelet and CNI use, then waits. Everything in it is unmounted when its last process exits.
const nsScript = `set -e
for d in /run /var/lib /var/log; do mount -t tmpfs -o mode=0755 tmpfs "$d"; done
mkdir -p /var/lib/kubelet/device-plugins /var/lib/cni /var/log/containers /var/log/pods /run/netns
echo ready
exec sleep 2147483647
`

// startNamespace starts the process that holds the node's mount namespace.
func (c *cluster) startNamespace() error {
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c", nsScript)
	out, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer out.Close()
	cmd.Stdout = w
	p, err := startProcWith(cmd, "mount namespace", c.logPath("namespace"))
	w.Close() // the child has its own copy
	if err != nil {
		return err
	}
	c.ns = p
	c.defer_(func() error { return c.stopNamespace() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		<-p.done
		return fmt.Errorf("making the node's mount namespace: %v (%q); log:\n%s", err, line, p.tail(20))
	}
	return nil
}

// stopNamespace kills what is left in the node's mount namespace (shims, containers) by PID, then the holder.
func (c *cluster) stopNamespace() error {
	if c.ns == nil {
		return nil
	}
	return killNamespace(c.ns)
}

// containerdConfig is the node's containerd config (version 4): everything under dir, the CRI with runc
// (containerd's own shim first in PATH), Debian's CNI plugins, the local pause image as sandbox image, and
// restrict_oom_score_adj (this VM lacks CAP_SYS_RESOURCE: without it no sandbox starts).
func (c *cluster) containerdConfig() string {
	d := filepath.Join(c.dir, "containerd")
	return fmt.Sprintf(`version = 4
root = %[1]q
state = %[2]q
temp = %[3]q
imports = []

[plugins.'io.containerd.server.v1.grpc']
  address = %[4]q
[plugins.'io.containerd.server.v1.ttrpc']
  address = %[5]q
[plugins.'io.containerd.server.v1.grpc-tcp']
  address = ''
[plugins.'io.containerd.server.v1.metrics']
  address = ''
[plugins.'io.containerd.server.v1.debug']
  address = ''
[plugins.'io.containerd.internal.v1.opt']
  path = %[6]q
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[7]q
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %[8]q
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  cdi_spec_dirs = []
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['/usr/lib/cni']
    conf_dir = %[9]q
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
`, filepath.Join(d, "root"), filepath.Join(d, "state"), filepath.Join(d, "tmp"), c.sock, c.sock+".ttrpc",
		filepath.Join(d, "opt"), pauseImage, filepath.Join(d, "certs.d"), c.cniConfDir())
}

func (c *cluster) cniConfDir() string { return filepath.Join(c.dir, "cni", "net.d") }

// cniConfig is a bridge with host-local IPAM, and portmap for the hostPorts of pods (spegel's registry in the
// chart's peers). No loopback plugin: containerd brings up lo itself. No masquerade: pods talk to the nodes and
// to each other's pods only. portmap's iptables rules on node 1 (the host) are removed by removeHostPorts.
func cniConfig() string { return cniConfigFor(bridgeName, podCIDR) }

// cniNetwork names the pod network; portmap puts it in its rules' comments.
const cniNetwork = "holdfast-test"

// cniConfigFor is cniConfig with the bridge and the pod range of a node.
func cniConfigFor(bridge, cidr string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [{
    "type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}
  }, {
    "type": "portmap", "capabilities": {"portMappings": true}, "snat": true
  }]
}
`, cniNetwork, bridge, cidr)
}

// removeHostPorts removes from the host's nat table what portmap left of the pod network's hostPorts (pods
// the CRI did not remove, a killed run): the rules naming the network, the chains they jump to, and portmap's
// own chains once no rule of another network is in them.
func removeHostPorts() error {
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil // portmap cannot have run
	}
	nat := func(args ...string) (string, error) {
		return run(append([]string{"iptables", "-w", "-t", "nat"}, args...)...)
	}
	out, err := nat("-S")
	if err != nil {
		return err
	}
	var errs []error
	var chains []string
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "-A ") || !strings.Contains(line, `name: \"`+cniNetwork+`\"`) {
			continue
		}
		rule, err := shellFields(strings.TrimPrefix(line, "-A "))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := nat(append([]string{"-D"}, rule...)...); err != nil {
			errs = append(errs, err)
		}
		if i := slices.Index(rule, "-j"); i >= 0 && i+1 < len(rule) && strings.HasPrefix(rule[i+1], "CNI-") && !strings.HasPrefix(rule[i+1], "CNI-HOSTPORT-") {
			chains = append(chains, rule[i+1])
		}
	}
	for _, ch := range chains {
		_, ferr := nat("-F", ch)
		_, xerr := nat("-X", ch)
		errs = append(errs, ferr, xerr)
	}
	if out, err = nat("-S", "CNI-HOSTPORT-DNAT"); err != nil || strings.Contains(out, "-A CNI-HOSTPORT-DNAT") {
		return errors.Join(errs...) // absent, or other networks' hostPorts still in it
	}
	// portmap's own chains, and the rules of the built-in chains that jump to them.
	out, err = nat("-S")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "-A ") && strings.Contains(line, "-j CNI-HOSTPORT-") && !strings.HasPrefix(line, "-A CNI-") {
			rule, err := shellFields(strings.TrimPrefix(line, "-A "))
			if err == nil {
				_, err = nat(append([]string{"-D"}, rule...)...)
			}
			errs = append(errs, err)
		}
	}
	for _, ch := range []string{"CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-SETMARK", "CNI-HOSTPORT-MASQ"} {
		if _, err := nat("-S", ch); err == nil {
			_, ferr := nat("-F", ch)
			_, xerr := nat("-X", ch)
			errs = append(errs, ferr, xerr)
		}
	}
	return errors.Join(errs...)
}

// shellFields splits an iptables -S line into its arguments: words, and double-quoted strings with
// backslash escapes (the comments).
func shellFields(s string) ([]string, error) {
	var fields []string
	var cur strings.Builder
	in, started := false, false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case in && ch == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case ch == '"':
			in, started = !in, true
		case !in && ch == ' ':
			if started {
				fields = append(fields, cur.String())
				cur.Reset()
				started = false
			}
		default:
			cur.WriteByte(ch)
			started = true
		}
	}
	if in {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if started {
		fields = append(fields, cur.String())
	}
	return fields, nil
}

func (c *cluster) startContainerd() error {
	if err := c.startNamespace(); err != nil {
		return err
	}
	d := filepath.Join(c.dir, "containerd")
	for _, sub := range []string{"root", "state", "tmp", "opt", "certs.d"} {
		if err := os.MkdirAll(filepath.Join(d, sub), 0o711); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(c.cniConfDir(), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.cniConfDir(), "10-holdfast-test.conflist"), []byte(cniConfig()), 0o644); err != nil {
		return err
	}
	// The socket in a dir of its own: the chart mounts the socket's dir into the holdfast pod.
	if err := os.MkdirAll(filepath.Join(c.dir, "run"), 0o711); err != nil {
		return err
	}
	c.sock = filepath.Join(c.dir, "run", "containerd.sock")
	cfg := filepath.Join(d, "config.toml")
	if err := os.WriteFile(cfg, []byte(c.containerdConfig()), 0o600); err != nil {
		return err
	}
	// Run after containerd has stopped (cleanups run in reverse): the kubelet's pod cgroups are empty then,
	// and no pod is left whose hostPorts portmap could still add.
	c.defer_(removeKubepodsCgroups)
	if err := removeHostPorts(); err != nil {
		return fmt.Errorf("removing the hostPort rules a killed run left: %w", err)
	}
	c.defer_(removeHostPorts)
	p, err := c.inNS("containerd", filepath.Join(c.repoBin, "holdfast-containerd"), "containerd", "--config", cfg)
	if err != nil {
		return err
	}
	c.defer_(func() error {
		// The kubelet leaves pods running when it stops: remove them through the CRI first.
		_, rmErr := c.crictl("rmp", "-fa")
		return errors.Join(rmErr, p.stop(15*time.Second))
	})
	return waitFor("containerd to answer on "+c.sock, time.Minute, func() (bool, error) {
		_, err := c.crictl("version")
		return err == nil, err
	}, p)
}

// crictl runs crictl against the node's containerd.
func (c *cluster) crictl(args ...string) (string, error) {
	argv := append([]string{filepath.Join(c.repoBin, "crictl"), "--runtime-endpoint", "unix://" + c.sock,
		"--image-endpoint", "unix://" + c.sock, "--timeout", "30s"}, args...)
	return run(argv...)
}

// holdfast runs the holdfast CLI against the node's containerd.
func (c *cluster) holdfast(args ...string) (string, error) {
	argv := append([]string{filepath.Join(c.repoBin, "holdfast")}, args...)
	argv = append(argv, "--address", c.sock, "--data-dir", filepath.Join(c.dir, "holdfast-cli"))
	return run(argv...)
}

// importPause builds the pause image from the cached pause binary and pins it with `holdfast sync`.
func (c *cluster) importPause() error {
	c.imagesDir = filepath.Join(c.dir, "test-images")
	if err := os.MkdirAll(c.imagesDir, 0o755); err != nil {
		return err
	}
	if err := writeStaticImage(filepath.Join(c.imagesDir, "pause.tar"), pauseImage,
		filepath.Join(c.k8sBin, "pause"), "/pause", nil); err != nil {
		return err
	}
	if _, err := c.holdfast("sync", "--images", c.imagesDir); err != nil {
		return err
	}
	out, err := c.crictl("inspecti", "-o", "json", pauseImage)
	if err != nil {
		return err
	}
	var st struct {
		Status struct {
			Pinned bool `json:"pinned"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return fmt.Errorf("reading crictl inspecti %s: %w", pauseImage, err)
	}
	if !st.Status.Pinned {
		return fmt.Errorf("%s is not pinned after holdfast sync: %s", pauseImage, out)
	}
	return nil
}

// defaultKubeletConfig is the node's KubeletConfiguration: cgroupfs, image GC and eviction off (tests that
// need them change them), syncFrequency 10 s so ConfigMap volumes update fast.
func (c *cluster) defaultKubeletConfig() map[string]any {
	off := "0%" // the kubelet ignores 0% thresholds
	return map[string]any{
		"apiVersion":                  "kubelet.config.k8s.io/v1beta1",
		"kind":                        "KubeletConfiguration",
		"address":                     nodeIP,
		"port":                        10250,
		"readOnlyPort":                0,
		"healthzBindAddress":          nodeIP,
		"healthzPort":                 10248,
		"tlsCertFile":                 c.pki.path("kubelet-serving.crt"),
		"tlsPrivateKeyFile":           c.pki.path("kubelet-serving.key"),
		"authentication":              map[string]any{"anonymous": map[string]any{"enabled": true}, "webhook": map[string]any{"enabled": false}, "x509": map[string]any{"clientCAFile": c.pki.path("ca.crt")}},
		"authorization":               map[string]any{"mode": "AlwaysAllow"},
		"cgroupDriver":                "cgroupfs",
		"cgroupsPerQOS":               true,
		"failSwapOn":                  false,
		"failCgroupV1":                false,
		"containerRuntimeEndpoint":    "unix://" + c.sock,
		"imageServiceEndpoint":        "unix://" + c.sock,
		"syncFrequency":               "10s",
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard": map[string]any{
			"memory.available": off, "nodefs.available": off, "nodefs.inodesFree": off,
			"imagefs.available": off, "imagefs.inodesFree": off,
		},
		"evictionPressureTransitionPeriod": "5s",
		"clusterDomain":                    clusterDomain,
		"clusterDNS":                       []string{nodeIP},
		"resolvConf":                       "/etc/resolv.conf",
		"shutdownGracePeriod":              "0s",
		"serializeImagePulls":              true,
		"rotateCertificates":               false,
		"serverTLSBootstrap":               false,
		"registerNode":                     true,
		"podCIDR":                          podCIDR,
		"maxPods":                          50,
		// No KUBE-FIREWALL/KUBE-IPTABLES-HINT chains in the host's iptables: nothing here needs them.
		"makeIPTablesUtilChains": false,
	}
}

// startNode starts the kubelet with the default config and waits until the node is Ready.
func (c *cluster) startNode() error {
	c.defer_(func() error {
		if p := c.procs["kubelet"]; p != nil {
			return p.stop(10 * time.Second)
		}
		return nil
	})
	return c.startKubelet(c.defaultKubeletConfig())
}

// startKubelet writes cfg and starts the kubelet in the node's mount namespace, then waits for node Ready.
func (c *cluster) startKubelet(cfg map[string]any) error {
	b, err := jsonIndent(cfg)
	if err != nil {
		return err
	}
	file := filepath.Join(c.dir, "kubelet-config.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return err
	}
	c.kubeletConfig = cfg
	p, err := c.inNS("kubelet", filepath.Join(c.k8sBin, "kubelet"),
		"--config", file,
		"--kubeconfig", c.pki.path("kubelet.kubeconfig"),
		"--root-dir", filepath.Join(c.dir, "kubelet"),
		"--cert-dir", filepath.Join(c.dir, "kubelet", "pki"),
		"--hostname-override", nodeName, "--node-ip", nodeIP,
		"--v", "2")
	if err != nil {
		return err
	}
	return waitFor("node "+nodeName+" Ready", 2*time.Minute, func() (bool, error) {
		return c.nodeReady()
	}, p, c.procs["containerd"])
}

// restartKubelet stops the kubelet and starts it again with cfg (pods keep running meanwhile).
func (c *cluster) restartKubelet(cfg map[string]any) error {
	if p := c.procs["kubelet"]; p != nil {
		if err := p.stop(10 * time.Second); err != nil {
			return err
		}
	}
	return c.startKubelet(cfg)
}

func (c *cluster) nodeReady() (bool, error) { return c.readyNode(nodeName) }

// removeKubepodsCgroups removes the cgroups the kubelet made (cgroupfs driver, cgroup v1: kubepods in every
// hierarchy), deepest first. Only empty cgroups can be removed; one still in use is an error.
func removeKubepodsCgroups() error { return removeCgroupTrees("kubepods") }

// removeCgroupTrees removes the cgroup name (a path below the hierarchies' roots) and everything below it
// in every hierarchy, cgroup v1 and v2, deepest first. Only empty cgroups can be removed; one still in use
// is an error.
func removeCgroupTrees(name string) error {
	roots, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", name))
	if fi, err := os.Stat(filepath.Join("/sys/fs/cgroup", name)); err == nil && fi.IsDir() {
		roots = append(roots, filepath.Join("/sys/fs/cgroup", name)) // cgroup v2
	}
	var errs []error
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// jsonIndent is a kubelet config file's bytes.
func jsonIndent(cfg map[string]any) ([]byte, error) { return json.MarshalIndent(cfg, "", "  ") }

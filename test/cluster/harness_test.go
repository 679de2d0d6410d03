package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The node's addresses and names. The node IP is a test-owned address put on lo for the run (the kubelet
// rejects a loopback node IP); the machine's own addresses are never used.
const (
	nodeIP      = "10.250.0.1"
	serviceCIDR = "10.0.0.0/24"
	serviceIP   = "10.0.0.1"
	podCIDR     = "10.244.0.0/24"
	bridgeName  = "hftest0"
	nodeName    = "holdfast-test-node"
	apiPort     = 6443
	// clusterDomain is the kubelets' and CoreDNS's (startDNS).
	clusterDomain = "cluster.local"
	// pauseImage is the CRI's sandbox image, built from the kubernetes module's pause.c and imported by holdfast.
	pauseImage = "registry.k8s.io/pause:3.10.2"
)

// cluster is a one-node Kubernetes cluster in a temp dir: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kube-proxy on the host, and the node's containerd and kubelet in one private mount
// namespace with tmpfs on /run, /var/lib and /var/log (the kubelet and CNI write fixed paths there).
type cluster struct {
	dir     string // everything the cluster writes
	k8sBin  string // kubelet, kube-apiserver, ..., etcd, pause
	repoBin string // holdfast, holdfast-containerd, containerd-shim-runc-v2, crictl

	pki        *pki
	admin      string // admin kubeconfig
	restConfig *rest.Config
	client     kubernetes.Interface

	etcdURL string
	ns      *proc // holds the private mount namespace
	procs   map[string]*proc

	// The node's containerd.
	sock      string // containerd's socket
	imagesDir string // archives the test imported with holdfast (pause)

	kubeletConfig map[string]any // the config the kubelet runs with now

	path string // PATH of every component; empty: the repo's bin first (see env)

	timings  []string // "what took how long", printed after the start
	cleanups []func() error
}

// logDir holds every component's log.
func (c *cluster) logDir() string { return filepath.Join(c.dir, "logs") }

func (c *cluster) logPath(name string) string { return filepath.Join(c.logDir(), name+".log") }

// timed runs step and records how long it took.
func (c *cluster) timed(what string, step func() error) error {
	start := time.Now()
	err := step()
	c.timings = append(c.timings, fmt.Sprintf("%s %.1fs", what, time.Since(start).Seconds()))
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// defer_ registers a cleanup step, run in reverse order by stop.
func (c *cluster) defer_(f func() error) { c.cleanups = append(c.cleanups, f) }

// startCluster starts the cluster. On error everything started is stopped again and the error carries the
// last lines of every component's log.
func startCluster(k8sBin, repoBin string) (c *cluster, err error) {
	// Not under /tmp: the node's dirs are mounted into the holdfast pod at the same paths, and the pod's /tmp
	// is an emptyDir (mode 0777, no sticky bit), which holdfast rightly refuses as a parent of an images dir.
	dir, err := os.MkdirTemp("/var/tmp", "holdfast-cluster-")
	if err != nil {
		return nil, err
	}
	c = &cluster{dir: dir, k8sBin: k8sBin, repoBin: repoBin, procs: map[string]*proc{}}
	c.defer_(func() error {
		if os.Getenv("HOLDFAST_CLUSTER_KEEP") != "" {
			fmt.Fprintf(os.Stderr, "cluster: keeping %s (HOLDFAST_CLUSTER_KEEP)\n", dir)
			return nil
		}
		return os.RemoveAll(dir)
	})
	defer func() {
		if err != nil {
			// The logs go with the temp dir: take their ends first.
			err = fmt.Errorf("%w\n%s", err, c.logTails(25))
			err = errors.Join(err, c.stop())
			c = nil
		}
	}()
	if err := os.MkdirAll(c.logDir(), 0o755); err != nil {
		return c, err
	}
	start := time.Now()
	steps := []struct {
		what string
		f    func() error
	}{
		{"node address", c.addNodeIP},
		{"certificates", c.writePKI},
		{"etcd", c.startEtcd},
		{"kube-apiserver", c.startAPIServer},
		{"controller-manager and scheduler", c.startControllers},
		{"cluster DNS", c.startDNS},
		{"containerd", c.startContainerd},
		{"pause image", c.importPause},
		{"kubelet and node Ready", c.startNode},
		{"kube-proxy", c.startProxy},
		{"default ServiceAccount", c.waitServiceAccount},
	}
	for _, s := range steps {
		if err := c.timed(s.what, s.f); err != nil {
			return c, err
		}
	}
	c.timings = append(c.timings, fmt.Sprintf("cluster up %.1fs", time.Since(start).Seconds()))
	return c, nil
}

// stop stops everything startCluster started, in reverse order, and returns every error.
func (c *cluster) stop() error {
	var errs []error
	for i := len(c.cleanups) - 1; i >= 0; i-- {
		errs = append(errs, c.cleanups[i]())
	}
	c.cleanups = nil
	return errors.Join(errs...)
}

// addNodeIP puts the node IP on lo. An address left by a run that was killed is taken over when nothing
// serves the API port on it; one in use by a running cluster test is an error.
func (c *cluster) addNodeIP() error {
	out, err := run("ip", "-o", "addr", "show", "dev", "lo")
	if err != nil {
		return err
	}
	if strings.Contains(out, " "+nodeIP+"/") {
		if conn, err := net.DialTimeout("tcp", net.JoinHostPort(nodeIP, strconv.Itoa(apiPort)), time.Second); err == nil {
			conn.Close()
			return fmt.Errorf("%s on lo serves port %d: another cluster test is running on this machine", nodeIP, apiPort)
		}
	} else if _, err := run("ip", "addr", "add", nodeIP+"/32", "dev", "lo"); err != nil {
		return err
	}
	c.defer_(func() error {
		_, err := run("ip", "addr", "del", nodeIP+"/32", "dev", "lo")
		return err
	})
	// A bridge a killed run left behind would carry its old address.
	if _, err := run("ip", "link", "show", bridgeName); err == nil {
		if _, err := run("ip", "link", "del", bridgeName); err != nil {
			return err
		}
	}
	c.defer_(func() error {
		if _, err := run("ip", "link", "show", bridgeName); err != nil {
			return nil // never created
		}
		_, err := run("ip", "link", "del", bridgeName)
		return err
	})
	return nil
}

func (c *cluster) writePKI() error {
	p, err := newPKI(filepath.Join(c.dir, "pki"), nodeName, net.ParseIP(nodeIP), net.ParseIP(serviceIP))
	if err != nil {
		return err
	}
	c.pki = p
	server := fmt.Sprintf("https://%s:%d", nodeIP, apiPort)
	for _, name := range []string{"admin", "kubelet", "controller-manager", "scheduler", "proxy"} {
		if _, err := p.kubeconfig(name, server); err != nil {
			return err
		}
	}
	c.admin = p.path("admin.kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", c.admin)
	if err != nil {
		return fmt.Errorf("loading %s: %w", c.admin, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	c.restConfig = cfg
	c.client, err = kubernetes.NewForConfig(cfg)
	return err
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// env is the environment of every component: c.path, by default the repo's bin first (containerd's own shim
// before any other).
func (c *cluster) env() []string {
	path := c.path
	if path == "" {
		path = c.repoBin + ":" + c.k8sBin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	return []string{
		"PATH=" + path,
		"HOME=" + c.dir,
	}
}

// startHost starts a component in the host's mount namespace; inNS starts it in the node's.
func (c *cluster) startHost(name string, argv ...string) (*proc, error) {
	p, err := startProc(name, c.logPath(name), c.env(), argv...)
	if err != nil {
		return nil, err
	}
	c.procs[name] = p
	c.defer_(func() error { return p.stop(10 * time.Second) })
	return p, nil
}

func (c *cluster) inNS(name string, argv ...string) (*proc, error) {
	full := append([]string{"nsenter", "--mount=/proc/" + strconv.Itoa(c.ns.cmd.Process.Pid) + "/ns/mnt", "--"}, argv...)
	p, err := startProc(name, c.logPath(name), c.env(), full...)
	if err != nil {
		return nil, err
	}
	c.procs[name] = p
	return p, nil
}

// waitFor polls cond every 100 ms until it holds, the deadline passes, or one of procs exits. The error
// names what was awaited and ends with the log tail of the process that exited, or cond's last error.
func waitFor(what string, timeout time.Duration, cond func() (bool, error), procs ...*proc) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		last = err
		for _, p := range procs {
			if p.exited() {
				return fmt.Errorf("waiting for %s: %s exited (%v); its log ends:\n%s", what, p.name, p.err, p.tail(30))
			}
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("waiting for %s: not done after %s", what, timeout)
			if last != nil {
				msg += ": " + last.Error()
			}
			for _, p := range procs {
				msg += fmt.Sprintf("\n%s's log ends:\n%s", p.name, p.tail(15))
			}
			return errors.New(msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *cluster) startEtcd() error {
	client, err := freePort()
	if err != nil {
		return err
	}
	peer, err := freePort()
	if err != nil {
		return err
	}
	c.etcdURL = fmt.Sprintf("http://127.0.0.1:%d", client)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	p, err := c.startHost("etcd", filepath.Join(c.k8sBin, "etcd"),
		"--name", "default",
		"--data-dir", filepath.Join(c.dir, "etcd"),
		"--listen-client-urls", c.etcdURL, "--advertise-client-urls", c.etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL,
		"--unsafe-no-fsync", "--log-level", "warn")
	if err != nil {
		return err
	}
	return waitFor("etcd to answer "+c.etcdURL+"/health", time.Minute, func() (bool, error) {
		conn, err := net.DialTimeout("tcp", strings.TrimPrefix(c.etcdURL, "http://"), time.Second)
		if err != nil {
			return false, err
		}
		conn.Close()
		return true, nil
	}, p)
}

func (c *cluster) startAPIServer() error {
	k := c.pki.path
	p, err := c.startHost("kube-apiserver", filepath.Join(c.k8sBin, "kube-apiserver"),
		"--advertise-address", nodeIP, "--bind-address", nodeIP, "--secure-port", strconv.Itoa(apiPort),
		"--etcd-servers", c.etcdURL,
		"--client-ca-file", k("ca.crt"),
		"--tls-cert-file", k("apiserver.crt"), "--tls-private-key-file", k("apiserver.key"),
		"--kubelet-client-certificate", k("apiserver-kubelet-client.crt"),
		"--kubelet-client-key", k("apiserver-kubelet-client.key"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", k("sa.pub"), "--service-account-signing-key-file", k("sa.key"),
		"--service-cluster-ip-range", serviceCIDR,
		"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
		"--kubelet-preferred-address-types", "InternalIP", // the node's name resolves nowhere
		// No front proxy here; set so that the controllers' delegated authentication finds a CA bundle.
		"--requestheader-client-ca-file", k("ca.crt"), "--requestheader-allowed-names", "front-proxy-client",
		"--requestheader-username-headers", "X-Remote-User", "--requestheader-group-headers", "X-Remote-Group",
		"--requestheader-extra-headers-prefix", "X-Remote-Extra-",
		"--allow-privileged=true", "--profiling=false",
		"--cert-dir", filepath.Join(c.dir, "apiserver"))
	if err != nil {
		return err
	}
	rc := c.client.Discovery().RESTClient()
	return waitFor("kube-apiserver /readyz", 2*time.Minute, func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		body, err := rc.Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, fmt.Errorf("%w: %s", err, body)
		}
		return true, nil
	}, p)
}

func (c *cluster) startControllers() error {
	k := c.pki.path
	cm, err := c.startHost("kube-controller-manager", filepath.Join(c.k8sBin, "kube-controller-manager"),
		"--kubeconfig", k("controller-manager.kubeconfig"),
		"--authentication-kubeconfig", k("controller-manager.kubeconfig"),
		"--authorization-kubeconfig", k("controller-manager.kubeconfig"),
		"--bind-address", nodeIP,
		"--service-account-private-key-file", k("sa.key"), "--root-ca-file", k("ca.crt"),
		"--use-service-account-credentials", "--leader-elect=false", "--allocate-node-cidrs=false",
		"--service-cluster-ip-range", serviceCIDR)
	if err != nil {
		return err
	}
	sched, err := c.startHost("kube-scheduler", filepath.Join(c.k8sBin, "kube-scheduler"),
		"--kubeconfig", k("scheduler.kubeconfig"),
		"--authentication-kubeconfig", k("scheduler.kubeconfig"),
		"--authorization-kubeconfig", k("scheduler.kubeconfig"),
		"--bind-address", nodeIP, "--leader-elect=false")
	if err != nil {
		return err
	}
	// Both serve /healthz on their secure ports once their informers run; a short check that neither exits
	// at once is enough here: the node and ServiceAccount waits below prove them working.
	return waitFor("kube-controller-manager and kube-scheduler to serve", time.Minute, func() (bool, error) {
		for _, port := range []int{10257, 10259} {
			conn, err := net.DialTimeout("tcp", net.JoinHostPort(nodeIP, strconv.Itoa(port)), time.Second)
			if err != nil {
				return false, err
			}
			conn.Close()
		}
		return true, nil
	}, cm, sched)
}

// startDNS starts CoreDNS on the host at the node IP, port 53, answering the cluster's names from the API:
// every node's kubelet gives it to its pods as their nameserver (clusterDNS), as a cluster's DNS Service would.
// Other names get no answer (the cluster reaches no registry or outside name).
func (c *cluster) startDNS() error {
	corefile := filepath.Join(c.dir, "Corefile")
	conf := fmt.Sprintf(`%[1]s:53 {
    bind %[2]s
    errors
    log . "{remote} {type} {name} {rcode}"
    kubernetes %[1]s in-addr.arpa {
        kubeconfig %[3]s
    }
}
`, clusterDomain, nodeIP, c.admin)
	if err := os.WriteFile(corefile, []byte(conf), 0o600); err != nil {
		return err
	}
	p, err := c.startHost("coredns", filepath.Join(c.k8sBin, "coredns"), "-conf", corefile)
	if err != nil {
		return err
	}
	return waitFor("CoreDNS to answer for the kubernetes Service", time.Minute, func() (bool, error) {
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort(nodeIP, "53"))
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		addrs, err := r.LookupHost(ctx, "kubernetes.default.svc."+clusterDomain)
		return err == nil && slices.Contains(addrs, serviceIP), fmt.Errorf("kubernetes.default.svc: %v, %v", addrs, err)
	}, p)
}

// startProxy starts kube-proxy in nftables mode (pods reach the API at https://10.0.0.1 through it) and
// removes its nftables tables at the end.
func (c *cluster) startProxy() error {
	cfg := c.proxyConfig(nodeName, nodeIP, podCIDR)
	file := filepath.Join(c.dir, "kube-proxy.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		return err
	}
	c.defer_(func() error {
		var errs []error
		for _, family := range []string{"ip", "ip6"} {
			if _, err := run("nft", "list", "table", family, "kube-proxy"); err == nil {
				_, err := run("nft", "delete", "table", family, "kube-proxy")
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
	p, err := c.startHost("kube-proxy", filepath.Join(c.k8sBin, "kube-proxy"), "--config", file)
	if err != nil {
		return err
	}
	return waitProxy(p, "nft")
}

// proxyConfig is the KubeProxyConfiguration of the node name at ip, its pods in cidr.
func (c *cluster) proxyConfig(name, ip, cidr string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
mode: nftables
clusterCIDR: %s
hostnameOverride: %s
bindAddress: %s
healthzBindAddress: %s:10256
metricsBindAddress: %s:10249
nodePortAddresses: [%s/32]
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
`, c.pki.path("proxy.kubeconfig"), cidr, name, ip, ip, ip, ip)
}

// waitProxy waits until the kube-proxy p has programmed the kubernetes Service in the nftables nft
// lists (the argv that runs nft, in the node's network namespace).
func waitProxy(p *proc, nft ...string) error {
	return waitFor(p.name+" to program the kubernetes Service", time.Minute, func() (bool, error) {
		out, err := run(append(nft, "list", "table", "ip", "kube-proxy")...)
		if err != nil {
			return false, err
		}
		return strings.Contains(out, serviceIP), fmt.Errorf("no rule for %s yet", serviceIP)
	}, p)
}

func (c *cluster) waitServiceAccount() error {
	return waitFor("the default ServiceAccount", 2*time.Minute, func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, err
		}
		return err == nil, err
	}, c.procs["kube-controller-manager"])
}

// logTails returns the end of every component's log.
func (c *cluster) logTails(n int) string {
	var b strings.Builder
	entries, _ := os.ReadDir(c.logDir())
	for _, e := range entries {
		fmt.Fprintf(&b, "----- %s (last %d lines) -----\n%s\n", e.Name(), n, tailFile(filepath.Join(c.logDir(), e.Name()), n))
	}
	return b.String()
}

// Package cluster runs holdfast on a real one-node Kubernetes cluster that the suite starts itself: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, CoreDNS and a kubelet on the node's
// containerd (holdfast-containerd: containerd with its CRI), with runc and CNI plugins from Debian. The Kubernetes
// binaries and CoreDNS are built from Go modules by scripts/cluster-deps.sh (make deps) and cached under
// $HOME/.cache/holdfast/cluster; HOLDFAST_CLUSTER_BIN points at them. The cluster starts once, in TestMain, and
// every test shares it.
package cluster

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

// The cluster every test shares, or why there is none: missing names a part the machine lacks (a test then
// skips or fails through testenv, which TestMain can't call), startErr a cluster that would not start.
var (
	shared   *cluster
	missing  string
	startErr error
)

// k8sVersion is the Kubernetes release the tools module builds (test/cluster/tools/go.mod).
const k8sVersion = "v1.36.3"

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("cluster: -short given, skipping the cluster suite")
		os.Exit(0)
	}
	code := func() int {
		k8sBin, repoBin, why := findTools()
		if why != "" {
			missing = why
			return m.Run()
		}
		c, err := startCluster(k8sBin, repoBin)
		if err != nil {
			startErr = err
			return m.Run()
		}
		fmt.Printf("cluster: started in %s (%s)\n", c.dir, strings.Join(c.timings, ", "))
		shared = c
		code := m.Run()
		if err := c.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "cluster: stopping: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
		return code
	}()
	os.Exit(code)
}

// needCluster returns the shared cluster, or skips or fails t saying why there is none. On failure the end
// of every component's log goes to t's output.
func needCluster(t *testing.T) *cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "needs root: the cluster test starts containerd, a kubelet and mounts tmpfs")
	}
	if missing != "" {
		testenv.Missing(t, "cluster", missing)
	}
	if startErr != nil {
		t.Fatalf("starting the cluster: %v", startErr)
	}
	c := shared
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster logs in %s:\n%s", c.logDir(), c.logTails(25))
		}
	})
	return c
}

// repoRoot is the repository's top directory: go test runs a package's tests
// in the package's directory (with -trimpath, as make test builds, file paths
// in the binary say nothing).
func repoRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Join(wd, "..", "..")
}

// findTools finds the Kubernetes binaries (HOLDFAST_CLUSTER_BIN, else the cache make deps fills) and the
// repo's bin (HOLDFAST_BIN, else bin/ at the top: holdfast, holdfast-containerd, containerd's shim, crictl),
// and the Debian parts. It returns why the cluster can't run, or "".
func findTools() (k8sBin, repoBin, why string) {
	if os.Geteuid() != 0 {
		return "", "", "" // needCluster says so through testenv's root part
	}
	k8sBin, repoBin = toolDirs()
	var lacking []string
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubelet", "pause", "coredns"} {
		if !executable(filepath.Join(k8sBin, b)) {
			lacking = append(lacking, filepath.Join(k8sBin, b)+" (make deps builds it: scripts/cluster-deps.sh)")
		}
	}
	for _, b := range []string{"holdfast", "holdfast-containerd"} {
		if !executable(filepath.Join(repoBin, b)) {
			lacking = append(lacking, filepath.Join(repoBin, b)+" (make build)")
		}
	}
	for _, b := range []string{"containerd-shim-runc-v2", "crictl"} {
		if !executable(filepath.Join(repoBin, b)) {
			lacking = append(lacking, filepath.Join(repoBin, b)+" (make deps)")
		}
	}
	if !executable("/usr/lib/cni/bridge") || !executable("/usr/lib/cni/host-local") || !executable("/usr/lib/cni/portmap") {
		lacking = append(lacking, "CNI plugins in /usr/lib/cni (apt-get install containernetworking-plugins)")
	}
	for _, b := range []string{"runc", "nft", "iptables", "ip", "unshare", "nsenter"} {
		if _, err := exec.LookPath(b); err != nil {
			lacking = append(lacking, b+" (make deps installs it with apt-get)")
		}
	}
	if len(lacking) > 0 {
		return "", "", "the one-node cluster needs " + strings.Join(lacking, ", ")
	}
	return k8sBin, repoBin, ""
}

// toolDirs returns where the Kubernetes binaries are (HOLDFAST_CLUSTER_BIN, else the cache make deps fills)
// and the repo's bin (HOLDFAST_BIN, else bin/ at the top).
func toolDirs() (k8sBin, repoBin string) {
	k8sBin = os.Getenv("HOLDFAST_CLUSTER_BIN")
	if k8sBin == "" {
		home, _ := os.UserHomeDir()
		k8sBin = filepath.Join(home, ".cache", "holdfast", "cluster", k8sVersion, "bin")
	}
	repoBin = os.Getenv("HOLDFAST_BIN")
	if repoBin == "" {
		repoBin = filepath.Join(repoRoot(), "bin")
	}
	return k8sBin, repoBin
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

package cluster

// Debian's containerd 1.6.20 with a real, standalone kubelet. That CRI never reports pinned, so the kubelet's
// image GC removes the images holdfast pins; holdfast restores them, backs off when the fight repeats, and a
// static pod of the pinned image still starts. This node is its own: temp dir, socket, mount namespace and
// ports, beside the shared cluster (which it never touches).

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

const (
	// oldImage is the image the fight is about: the pause binary under another name (a label in its config
	// gives it an ID of its own). The static pod runs it.
	oldImage    = "holdfast.test/old/sleeper:1"
	oldPodName  = "old-sleeper"
	oldNodeName = "holdfast-old-node"
	oldBinPath  = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

func TestOldContainerdKubeletImageGC(t *testing.T) {
	k8sBin, repoBin := oldTools(t)
	// Debian's own shim (1.6) through PATH: the repo's bin is not on it.
	n, cgroupRoot := standaloneNode(t, "holdfast-old-", oldBinPath, k8sBin, repoBin)
	dir := n.dir
	if err := n.oldStartContainerd(); err != nil {
		t.Fatal(err)
	}

	images := filepath.Join(dir, "images")
	if err := os.MkdirAll(images, 0o755); err != nil {
		t.Fatal(err)
	}
	pauseBin := filepath.Join(k8sBin, "pause")
	if err := writeStaticImage(filepath.Join(images, "pause.tar"), pauseImage, pauseBin, "/pause", nil); err != nil {
		t.Fatal(err)
	}
	if err := writeStaticImage(filepath.Join(images, "sleeper.tar"), oldImage, pauseBin, "/sleeper",
		map[string]string{"holdfast.test/role": oldPodName}); err != nil {
		t.Fatal(err)
	}
	listen, err := n.oldStartHoldfast(images)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{pauseImage, oldImage} {
		if err := n.oldPinnedComplete(ref); err != nil {
			t.Fatalf("after holdfast's first pass: %v", err)
		}
	}
	sleeperID, err := n.oldImageID(oldImage)
	if err != nil {
		t.Fatal(err)
	}
	// The premise: this CRI does not report holdfast's pin, so the kubelet sees nothing to spare.
	out, err := n.crictl("inspecti", "-o", "json", oldImage)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ReplaceAll(out, " ", ""), `"pinned":true`) {
		t.Fatalf("containerd 1.6's CRI reports %s pinned: this test's premise is gone:\n%s", oldImage, out)
	}

	manifests := filepath.Join(dir, "manifests")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	kubeletStart := time.Now()
	kubelet, err := n.oldStartKubelet(manifests, cgroupRoot, 2)
	if err != nil {
		t.Fatal(err)
	}

	// The kubelet's image GC, run by the eviction manager under imagefs pressure, removes the pinned image.
	removals := func() int { return len(oldRemovals(kubelet.log, sleeperID)) }
	heals := func() int { return len(n.oldHeals(oldImage)) }
	if err := waitFor("the kubelet to remove "+oldImage+" ("+sleeperID+")", 4*time.Minute, func() (bool, error) {
		return removals() > 0, nil
	}, kubelet, n.procs["containerd"], n.procs["holdfast"]); err != nil {
		t.Fatal(err)
	}
	firstDelete := time.Since(kubeletStart)
	if err := waitFor("holdfast to heal "+oldImage, time.Minute, func() (bool, error) {
		return heals() > 0, nil
	}, n.procs["holdfast"]); err != nil {
		t.Fatal(err)
	}
	if err := n.oldPinnedCompleteWithin(oldImage, 2*time.Minute); err != nil {
		t.Fatalf("after the first heal: %v", err)
	}

	// The fight repeats; after healBurst heals within healWindow holdfast backs off and says so.
	var rep oldReport
	if err := waitFor("holdfast to back off healing "+oldImage, 5*time.Minute, func() (bool, error) {
		r, err := oldGetReport(listen)
		if err != nil {
			return false, err
		}
		rep = r
		for _, name := range r.HealBackoff {
			if name == oldImage {
				return true, nil
			}
		}
		return false, fmt.Errorf("healBackoff is %v", r.HealBackoff)
	}, kubelet, n.procs["holdfast"]); err != nil {
		t.Fatal(err)
	}
	backoffAt := time.Since(kubeletStart)
	healsAtBackoff, removalsAtBackoff := heals(), removals()
	t.Logf("first removal by the kubelet %.0fs after its start; backoff %.0fs after its start, after %d removals of %s and %d heals",
		firstDelete.Seconds(), backoffAt.Seconds(), removalsAtBackoff, oldImage, healsAtBackoff)
	if healsAtBackoff < 3 {
		t.Errorf("backoff after %d heals of %s; want at least 3 (healBurst)", healsAtBackoff, oldImage)
	}
	if removalsAtBackoff < 3 {
		t.Errorf("backoff after %d removals of %s by the kubelet; want at least 3", removalsAtBackoff, oldImage)
	}
	event := false
	for _, e := range rep.Events {
		if e.Reason == "HealBackoff" && strings.Contains(e.Message, oldImage) {
			event = true
		}
	}
	if !event {
		t.Errorf("/report has no HealBackoff event naming %s: %+v", oldImage, rep.Events)
	}
	metrics, err := oldGet("http://" + listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if v := metricValue(metrics, `holdfast_heal_backoff_images`); v < 1 {
		t.Errorf("holdfast_heal_backoff_images is %v; want at least 1", v)
	}
	if v := metricValue(metrics, `holdfast_heals_total{cause="missing"}`); v < 3 {
		t.Errorf(`holdfast_heals_total{cause="missing"} is %v; want at least 3`, v)
	}
	if got := countMatches(n.procs["holdfast"].log, regexp.MustCompile(`"msg":"something keeps removing a pinned image.*`+regexp.QuoteMeta(oldImage))); got != 1 {
		t.Errorf("holdfast warned %d times about %s being removed again and again; want once", got, oldImage)
	}

	// In backoff holdfast still heals, but waits longer each time (1 s, doubling): once the wait outlasts
	// the kubelet's rhythm, a removal is healed only seconds later. The record comes back, pinned twice and
	// complete.
	var lag time.Duration
	if err := waitFor("a heal of "+oldImage+" held back by the backoff", 8*time.Minute, func() (bool, error) {
		lag = oldLongestLag(oldRemovals(kubelet.log, sleeperID), n.oldHeals(oldImage))
		return lag >= 5*time.Second, fmt.Errorf("longest wait from a removal to its heal so far: %s", lag)
	}, kubelet, n.procs["holdfast"]); err != nil {
		t.Fatal(err)
	}
	t.Logf("a heal held back %.1fs after the kubelet's removal, %.0fs after the kubelet's start; by then %d removals, %d heals",
		lag.Seconds(), time.Since(kubeletStart).Seconds(), removals(), heals())
	if err := n.oldPinnedCompleteWithin(oldImage, 5*time.Minute); err != nil {
		t.Fatalf("after the backoff: %v", err)
	}

	// A static pod of the pinned image, written while holdfast holds back the heal of the kubelet's latest
	// removal: the image is absent then, and the pod starts once holdfast has restored it.
	var podAt time.Time
	if err := waitFor("a removal of "+oldImage+" whose heal is held back", 5*time.Minute, func() (bool, error) {
		rs := oldRemovals(kubelet.log, sleeperID)
		if len(rs) == 0 {
			return false, nil
		}
		last := rs[len(rs)-1]
		hs := n.oldHeals(oldImage)
		if (len(hs) > 0 && !hs[len(hs)-1].Before(last)) || time.Since(last) < 2*time.Second {
			return false, fmt.Errorf("the last removal at %s is healed or too recent", last.Format(time.StampMicro))
		}
		if _, err := n.oldImageID(oldImage); err == nil {
			return false, fmt.Errorf("%s is present", oldImage)
		}
		podAt = time.Now()
		if err := oldWriteAtomic(filepath.Join(manifests, oldPodName+".yaml"), oldStaticPod()); err != nil {
			return false, err
		}
		if hs := n.oldHeals(oldImage); len(hs) > 0 && hs[len(hs)-1].Before(podAt) && !hs[len(hs)-1].Before(last) {
			return false, fmt.Errorf("%s was healed before the pod's manifest was written", oldImage)
		}
		return true, nil
	}, kubelet, n.procs["holdfast"]); err != nil {
		t.Fatal(err)
	}
	var ctr oldContainer
	if err := waitFor("the static pod "+oldPodName+" to run", 8*time.Minute, func() (bool, error) {
		c, err := n.oldRunningContainer()
		ctr = c
		return err == nil, err
	}, kubelet, n.procs["containerd"]); err != nil {
		t.Fatal(err)
	}
	// The kubelet did try while the image was absent, and failed: the start is holdfast's heal's doing.
	if n := countMatches(kubelet.log, regexp.MustCompile(`(?m)^E.*`+regexp.QuoteMeta(oldPodName+"-"+oldNodeName)+`.*(CreatePodSandboxError|ErrImageNeverPull)`)); n == 0 {
		t.Errorf("the kubelet's log shows no failed start of %s while %s was absent", oldPodName, oldImage)
	}
	if ctr.ImageRef != sleeperID {
		t.Errorf("the static pod's container runs image %s; want %s (%s)", ctr.ImageRef, sleeperID, oldImage)
	}
	t.Logf("static pod running %.0fs after its manifest was written (the image absent then); by then %d removals of %s, %d heals",
		time.Since(podAt).Seconds(), removals(), oldImage, heals())
}

// standaloneNode is a node of its own beside the shared cluster, for a standalone kubelet: a temp dir (kept with
// HOLDFAST_CLUSTER_KEEP), its components on PATH path, and a cgroup root named after the dir, under which its
// pods go, away from the shared cluster's kubepods. The test's end stops it, with the logs' ends if it failed.
func standaloneNode(t *testing.T, prefix, path, k8sBin, repoBin string) (*cluster, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	n := &cluster{dir: dir, k8sBin: k8sBin, repoBin: repoBin, procs: map[string]*proc{}, path: path}
	n.defer_(func() error {
		if os.Getenv("HOLDFAST_CLUSTER_KEEP") != "" {
			t.Logf("keeping %s (HOLDFAST_CLUSTER_KEEP)", dir)
			return nil
		}
		return os.RemoveAll(dir)
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs in %s:\n%s", n.logDir(), n.logTails(40))
		}
		if err := n.stop(); err != nil {
			t.Errorf("stopping the node in %s: %v", dir, err)
		}
	})
	if err := os.MkdirAll(n.logDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	cgroupRoot := filepath.Base(dir)
	if err := n.oldMakeCgroupRoot(cgroupRoot); err != nil {
		t.Fatal(err)
	}
	return n, cgroupRoot
}

// oldWriteAtomic writes a file the kubelet watches under a dot name it ignores, then renames it: it never
// reads a half-written manifest.
func oldWriteAtomic(path, content string) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// oldTools returns the Kubernetes and repo bin dirs, or skips or fails t through testenv when a part this
// test needs is missing: Debian's containerd 1.6, the kubelet and pause, holdfast, crictl, runc.
func oldTools(t *testing.T) (k8sBin, repoBin string) {
	t.Helper()
	testenv.RequireRoot(t, "the old-containerd test starts containerd and a kubelet and mounts tmpfs")
	out, err := exec.Command("/usr/bin/containerd", "--version").Output()
	if err != nil || !strings.Contains(string(out), " 1.6.") {
		testenv.Missing(t, "containerd-1.6", fmt.Sprintf("/usr/bin/containerd is not Debian's containerd 1.6 (%v %s; make deps installs it)", err, strings.TrimSpace(string(out))))
	}
	k8sBin, repoBin = toolDirs()
	var lacking []string
	for _, b := range []string{filepath.Join(k8sBin, "kubelet"), filepath.Join(k8sBin, "pause"),
		filepath.Join(repoBin, "holdfast"), filepath.Join(repoBin, "crictl"), "/usr/bin/ctr", "/usr/bin/containerd-shim-runc-v2"} {
		if !executable(b) {
			lacking = append(lacking, b)
		}
	}
	for _, b := range []string{"runc", "unshare", "nsenter"} {
		if _, err := exec.LookPath(b); err != nil {
			lacking = append(lacking, b)
		}
	}
	if len(lacking) > 0 {
		testenv.Missing(t, "cluster", "the old-containerd test needs "+strings.Join(lacking, ", ")+" (make build, make deps)")
	}
	return k8sBin, repoBin
}

// oldContainerdConfig is Debian containerd 1.6's config (version 2): everything under the node's dir, the CRI
// with runc (Debian's shim), the locally built pause image as sandbox image and restrict_oom_score_adj (this
// VM lacks CAP_SYS_RESOURCE). No CNI config: the static pod uses the host's network.
func (c *cluster) oldContainerdConfig() string {
	d := filepath.Join(c.dir, "containerd")
	return testenv.Containerd16Config(d, c.sock, true) + fmt.Sprintf(`[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
`, pauseImage, c.cniConfDir())
}

// oldStartContainerd starts Debian's containerd in the node's own mount namespace. Its cleanup removes the
// pods through the CRI, then stops it.
func (c *cluster) oldStartContainerd() error {
	if err := c.startNamespace(); err != nil {
		return err
	}
	d := filepath.Join(c.dir, "containerd")
	for _, sub := range []string{"root", "state", "opt"} {
		if err := os.MkdirAll(filepath.Join(d, sub), 0o711); err != nil {
			return err
		}
	}
	for _, sub := range []string{c.cniConfDir(), filepath.Join(c.dir, "run")} {
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return err
		}
	}
	c.sock = filepath.Join(c.dir, "run", "containerd.sock")
	cfg := filepath.Join(d, "config.toml")
	if err := os.WriteFile(cfg, []byte(c.oldContainerdConfig()), 0o600); err != nil {
		return err
	}
	p, err := c.inNS("containerd", "/usr/bin/containerd", "--config", cfg)
	if err != nil {
		return err
	}
	c.defer_(func() error {
		// Pods outlive the kubelet: remove them through the CRI while containerd still runs.
		_, rmErr := c.crictl("rmp", "-fa")
		return errors.Join(rmErr, p.stop(15*time.Second))
	})
	return waitFor("containerd 1.6 to answer on "+c.sock, time.Minute, func() (bool, error) {
		_, err := c.crictl("version")
		return err == nil, err
	}, p)
}

// oldStartHoldfast starts `holdfast run` on the node's containerd with images as its images dir, and waits
// until it is ready. It returns the address of its /report and /metrics.
func (c *cluster) oldStartHoldfast(images string) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	p, err := c.startHost("holdfast", filepath.Join(c.repoBin, "holdfast"), "run",
		"--address", c.sock, "--images", images, "--data-dir", filepath.Join(c.dir, "holdfast"),
		"--listen", listen, "--log-format", "json", "--resync", "1h")
	if err != nil {
		return "", err
	}
	return listen, waitFor("holdfast run to be ready on "+listen, 2*time.Minute, func() (bool, error) {
		_, err := oldGet("http://" + listen + "/readyz")
		return err == nil, err
	}, p)
}

// oldKubeletConfig is a standalone kubelet's config: static pods from manifests, no API server, its own
// ports on 127.0.0.1, its own cgroupRoot (the shared cluster's kubelet owns /kubepods), and an imagefs.available
// threshold above what the image filesystem has free, so that its eviction manager runs the image GC every
// 10 s; imageMinimumGCAge 1s (0 means the default, 2 min).
func (c *cluster) oldKubeletConfig(manifests, cgroupRoot string, port, healthz int, imagefsFree uint64) map[string]any {
	off := "0%" // the kubelet ignores 0% thresholds
	return map[string]any{
		"apiVersion":                  "kubelet.config.k8s.io/v1beta1",
		"kind":                        "KubeletConfiguration",
		"address":                     "127.0.0.1",
		"port":                        port,
		"readOnlyPort":                0,
		"healthzBindAddress":          "127.0.0.1",
		"healthzPort":                 healthz,
		"authentication":              map[string]any{"anonymous": map[string]any{"enabled": true}, "webhook": map[string]any{"enabled": false}},
		"authorization":               map[string]any{"mode": "AlwaysAllow"},
		"cgroupDriver":                "cgroupfs",
		"cgroupsPerQOS":               true,
		"cgroupRoot":                  "/" + cgroupRoot,
		"failSwapOn":                  false,
		"failCgroupV1":                false,
		"containerRuntimeEndpoint":    "unix://" + c.sock,
		"imageServiceEndpoint":        "unix://" + c.sock,
		"staticPodPath":               manifests,
		"fileCheckFrequency":          "2s",
		"syncFrequency":               "10s",
		"imageMinimumGCAge":           "1s",
		"imageGCHighThresholdPercent": 2,
		"imageGCLowThresholdPercent":  1,
		"evictionHard": map[string]any{
			"memory.available": off, "nodefs.available": off, "nodefs.inodesFree": off, "imagefs.inodesFree": off,
			"imagefs.available": fmt.Sprintf("%dMi", imagefsFree>>20+16<<10),
		},
		"evictionPressureTransitionPeriod": "5s",
		"resolvConf":                       "/etc/resolv.conf",
		"shutdownGracePeriod":              "0s",
		"makeIPTablesUtilChains":           false,
		"maxPods":                          10,
	}
}

// oldStartKubelet starts the standalone kubelet in the node's mount namespace, logging at verbosity v, and waits
// for its /healthz.
func (c *cluster) oldStartKubelet(manifests, cgroupRoot string, v int) (*proc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	healthz, err := freePort()
	if err != nil {
		return nil, err
	}
	var st syscall.Statfs_t
	root := filepath.Join(c.dir, "containerd", "root")
	if err := syscall.Statfs(root, &st); err != nil {
		return nil, fmt.Errorf("statfs %s: %w", root, err)
	}
	b, err := json.MarshalIndent(c.oldKubeletConfig(manifests, cgroupRoot, port, healthz, st.Bavail*uint64(st.Bsize)), "", "  ")
	if err != nil {
		return nil, err
	}
	file := filepath.Join(c.dir, "kubelet-config.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return nil, err
	}
	p, err := c.inNS("kubelet", filepath.Join(c.k8sBin, "kubelet"),
		"--config", file,
		"--root-dir", filepath.Join(c.dir, "kubelet"),
		"--cert-dir", filepath.Join(c.dir, "kubelet", "pki"),
		"--hostname-override", oldNodeName,
		"--v", strconv.Itoa(v))
	if err != nil {
		return nil, err
	}
	c.defer_(func() error { return p.stop(10 * time.Second) })
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", healthz)
	return p, waitFor("the kubelet's "+url, 2*time.Minute, func() (bool, error) {
		_, err := oldGet(url)
		return err == nil, err
	}, p, c.procs["containerd"])
}

// oldStaticPod is the static pod of oldImage: host network (no CNI here), never pulled.
func oldStaticPod() string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: default
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: sleeper
    image: %s
    imagePullPolicy: Never
`, oldPodName, oldImage)
}

// oldImageID is the CRI's ID (config digest) of ref.
func (c *cluster) oldImageID(ref string) (string, error) {
	out, err := c.crictl("inspecti", "-o", "json", ref)
	if err != nil {
		return "", err
	}
	var st struct {
		Status struct {
			ID string `json:"id"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Status.ID == "" {
		return "", fmt.Errorf("reading crictl inspecti %s: %v: %s", ref, err, out)
	}
	return st.Status.ID, nil
}

// oldPinnedComplete checks that ref's record exists with both pin labels (holdfast status) and that its
// content is complete (ctr images check).
func (c *cluster) oldPinnedComplete(ref string) error {
	out, err := c.holdfast("status", "-o", "json")
	if err != nil {
		return err
	}
	var st struct {
		Images []struct {
			Name   string `json:"name"`
			Pinned bool   `json:"pinned"`
			Owned  bool   `json:"owned"`
		} `json:"images"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return fmt.Errorf("reading holdfast status -o json: %w", err)
	}
	found := false
	for _, img := range st.Images {
		if img.Name == ref {
			found = true
			if !img.Pinned || !img.Owned {
				return fmt.Errorf("%s: pinned=%v owned=%v; want both", ref, img.Pinned, img.Owned)
			}
		}
	}
	if !found {
		return fmt.Errorf("holdfast status lists no record %s", ref)
	}
	out, err = run("/usr/bin/ctr", "--address", c.sock, "--namespace", "k8s.io", "images", "check", "name=="+ref)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && f[0] == ref {
			if f[3] != "complete" {
				return fmt.Errorf("ctr images check %s: %s", ref, line)
			}
			return nil
		}
	}
	return fmt.Errorf("ctr images check lists no %s: %s", ref, out)
}

// oldPinnedCompleteWithin waits until oldPinnedComplete holds at one moment: the kubelet may remove the
// record again at any time.
func (c *cluster) oldPinnedCompleteWithin(ref string, timeout time.Duration) error {
	return waitFor(ref+" pinned twice and complete", timeout, func() (bool, error) {
		err := c.oldPinnedComplete(ref)
		return err == nil, err
	}, c.procs["holdfast"], c.procs["containerd"])
}

// oldHeals returns the times of holdfast's "healed" log lines for name.
func (c *cluster) oldHeals(name string) []time.Time {
	f, err := os.Open(c.procs["holdfast"].log)
	if err != nil {
		return nil
	}
	defer f.Close()
	var heals []time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
			Name string    `json:"name"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "healed" && l.Name == name {
			heals = append(heals, l.Time)
		}
	}
	return heals
}

// oldRemovals returns the times of the kubelet's "Removing image to free bytes" log lines for imageID.
// klog's header has no year: this year is assumed, in local time as klog writes it.
func oldRemovals(log, imageID string) []time.Time {
	b, err := os.ReadFile(log)
	if err != nil {
		return nil
	}
	var times []time.Time
	year := time.Now().Year()
	for _, line := range strings.Split(string(b), "\n") {
		if len(line) < 21 || !strings.Contains(line, `"Removing image to free bytes"`) || !strings.Contains(line, `imageID="`+imageID+`"`) {
			continue
		}
		t, err := time.ParseInLocation("0102 15:04:05.000000", line[1:21], time.Local)
		if err != nil {
			continue
		}
		times = append(times, t.AddDate(year, 0, 0))
	}
	return times
}

// oldLongestLag is the longest time from a removal to the first heal after it.
func oldLongestLag(removals, heals []time.Time) time.Duration {
	var longest time.Duration
	for _, r := range removals {
		for _, h := range heals {
			if !h.Before(r) {
				longest = max(longest, h.Sub(r))
				break
			}
		}
	}
	return longest
}

// oldMakeCgroupRoot makes the cgroup name in every hierarchy (cgroup v1; the root on v2) for the kubelet's
// cgroupRoot. Its cleanup, registered first, removes the tree once containerd and the pods are gone.
func (c *cluster) oldMakeCgroupRoot(name string) error {
	// A killed run leaves its (empty) cgroups behind with no temp dir: sweep those first.
	stale, _ := filepath.Glob("/sys/fs/cgroup/*/holdfast-old-*")
	for _, s := range stale {
		if _, err := os.Stat(filepath.Join(os.TempDir(), filepath.Base(s))); os.IsNotExist(err) {
			_ = removeCgroupTrees(filepath.Base(s)) // one still in use stays
		}
	}
	c.defer_(func() error { return removeCgroupTrees(name) })
	hierarchies := []string{"/sys/fs/cgroup"}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.procs"); err != nil {
		hierarchies, _ = filepath.Glob("/sys/fs/cgroup/*")
	}
	for _, h := range hierarchies {
		if fi, err := os.Lstat(h); err != nil || !fi.IsDir() {
			continue // cpu,cpuacct-style links name a hierarchy listed under its own name too
		}
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err != nil {
			continue
		}
		dir := filepath.Join(h, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			return fmt.Errorf("making cgroup %s: %w", dir, err)
		}
		// A new cpuset cgroup has no CPUs or memory nodes: give it its parent's.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("writing %s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

type oldContainer struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	ImageRef string `json:"imageRef"`
}

// oldRunningContainer returns the static pod's container once its sandbox is ready and it runs.
func (c *cluster) oldRunningContainer() (oldContainer, error) {
	out, err := c.crictl("pods", "--name", oldPodName, "-o", "json")
	if err != nil {
		return oldContainer{}, err
	}
	var pods struct {
		Items []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &pods); err != nil {
		return oldContainer{}, fmt.Errorf("reading crictl pods: %w: %s", err, out)
	}
	for _, p := range pods.Items {
		if p.State != "SANDBOX_READY" {
			continue
		}
		out, err := c.crictl("ps", "--pod", p.ID, "--name", "sleeper", "-o", "json")
		if err != nil {
			return oldContainer{}, err
		}
		var ctrs struct {
			Containers []oldContainer `json:"containers"`
		}
		if err := json.Unmarshal([]byte(out), &ctrs); err != nil {
			return oldContainer{}, fmt.Errorf("reading crictl ps: %w: %s", err, out)
		}
		for _, ct := range ctrs.Containers {
			if ct.State == "CONTAINER_RUNNING" {
				return ct, nil
			}
		}
	}
	return oldContainer{}, fmt.Errorf("no running sleeper container in a ready sandbox %s yet: %s", oldPodName, out)
}

// oldReport is the part of holdfast's /report this test reads.
type oldReport struct {
	HealBackoff []string `json:"healBackoff"`
	Events      []struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"events"`
}

func oldGetReport(listen string) (oldReport, error) {
	var r oldReport
	body, err := oldGet("http://" + listen + "/report")
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return r, fmt.Errorf("reading /report: %w: %s", err, body)
	}
	return r, nil
}

// oldGet fetches url and returns its body; any status but 200 is an error.
func oldGet(url string) (string, error) {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b), nil
}

// countMatches counts the lines of file that re matches.
func countMatches(file string, re *regexp.Regexp) int {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	return len(re.FindAll(b, -1))
}

// metricValue returns the value of the Prometheus sample named series (name and labels as exposed), or -1.
func metricValue(exposition, series string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

package cluster

// K3s's containerd (v2.3.2-k3s2, the one K3s v1.36 ships) with a real, standalone kubelet under image GC: its
// CRI reports holdfast's pins, so the kubelet spares the pinned images and collects an unpinned one. The node
// is its own, as the old-containerd test's (temp dir, socket, mount namespace, ports, cgroup root).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

const (
	k3sPinned = "holdfast.test/k3s/pinned:1" // from the images dir: pinned by holdfast
	k3sLoose  = "holdfast.test/k3s/loose:1"  // imported by ctr, never pinned
)

func TestK3sContainerdKubeletImageGC(t *testing.T) {
	k8sBin, repoBin := oldTools(t)
	line, ok := testenv.LineNamed("k3s-2.3")
	if !ok {
		t.Fatal("no K3s line in testenv.Lines")
	}
	bin, why := line.Binary()
	if why != "" {
		testenv.Missing(t, "containerd-lines", why)
	}
	// The repo's containerd-shim-runc-v2 (a 2.x shim) first on PATH.
	n, cgroupRoot := standaloneNode(t, "holdfast-k3s-", repoBin+":"+oldBinPath, k8sBin, repoBin)
	dir := n.dir
	if err := n.k3sStartContainerd(line, bin); err != nil {
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
	if err := writeStaticImage(filepath.Join(images, "pinned.tar"), k3sPinned, pauseBin, "/pinned",
		map[string]string{"holdfast.test/role": "pinned"}); err != nil {
		t.Fatal(err)
	}
	loose := filepath.Join(dir, "loose.tar")
	if err := writeStaticImage(loose, k3sLoose, pauseBin, "/loose", map[string]string{"holdfast.test/role": "loose"}); err != nil {
		t.Fatal(err)
	}
	if out, err := run("/usr/bin/ctr", "--address", n.sock, "--namespace", criNamespace, "images", "import", loose); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
	if _, err := n.oldStartHoldfast(images); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{pauseImage, k3sPinned} {
		if err := n.oldPinnedComplete(ref); err != nil {
			t.Fatalf("after holdfast's first pass: %v", err)
		}
	}
	ids := map[string]string{}
	for _, ref := range []string{pauseImage, k3sPinned, k3sLoose} {
		var err error
		if ids[ref], err = n.oldImageID(ref); err != nil {
			t.Fatal(err)
		}
	}
	// The premise: this CRI reports holdfast's pins, and not the loose image as pinned.
	for ref, want := range map[string]bool{k3sPinned: true, k3sLoose: false} {
		out, err := n.crictl("inspecti", "-o", "json", ref)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(strings.ReplaceAll(out, " ", ""), `"pinned":true`); got != want {
			t.Fatalf("K3s's containerd's CRI reports %s pinned=%v, want %v:\n%s", ref, got, want, out)
		}
	}

	manifests := filepath.Join(dir, "manifests")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Verbosity 5: the kubelet logs each image it spares for its pin.
	kubelet, err := n.oldStartKubelet(manifests, cgroupRoot, 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitFor("the kubelet's image GC to remove "+k3sLoose, 4*time.Minute, func() (bool, error) {
		return len(oldRemovals(kubelet.log, ids[k3sLoose])) > 0, nil
	}, kubelet, n.procs["containerd"]); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s removed by the kubelet's image GC %.0fs after its start", k3sLoose, time.Since(start).Seconds())
	// Three more rounds of the GC that spare the pinned images for their pin: it ran with them there.
	spared := func(ref string) int {
		return countMatches(kubelet.log, regexp.MustCompile(`"Image is pinned, skipping garbage collection" imageID="`+regexp.QuoteMeta(ids[ref])+`"`))
	}
	seen := spared(k3sPinned)
	if err := waitFor("three more image GC rounds sparing "+k3sPinned, 3*time.Minute, func() (bool, error) {
		return spared(k3sPinned) >= seen+3, fmt.Errorf("spared %d times so far", spared(k3sPinned))
	}, kubelet, n.procs["containerd"]); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{pauseImage, k3sPinned} {
		if rs := oldRemovals(kubelet.log, ids[ref]); len(rs) != 0 {
			t.Errorf("the kubelet removed %s %d times", ref, len(rs))
		}
		if hs := n.oldHeals(ref); len(hs) != 0 {
			t.Errorf("holdfast healed %s %d times: something removed it", ref, len(hs))
		}
		if err := n.oldPinnedComplete(ref); err != nil {
			t.Error(err)
		}
	}
	if _, err := n.oldImageID(k3sLoose); err == nil {
		t.Errorf("%s is still there after the kubelet removed it", k3sLoose)
	}
	t.Logf("the kubelet spared %s %d times and the sandbox image %d times", k3sPinned, spared(k3sPinned), spared(pauseImage))
}

// k3sStartContainerd starts the line's containerd (bin) in the node's own mount namespace with its CRI: runc,
// the locally built pause image as the pinned sandbox image, restrict_oom_score_adj (this VM lacks
// CAP_SYS_RESOURCE). Its cleanup removes the pods through the CRI, then stops it.
func (c *cluster) k3sStartContainerd(line testenv.Line, bin string) error {
	if err := c.startNamespace(); err != nil {
		return err
	}
	d := filepath.Join(c.dir, "containerd")
	if err := os.MkdirAll(filepath.Join(c.dir, "run"), 0o755); err != nil {
		return err
	}
	c.sock = filepath.Join(c.dir, "run", "containerd.sock")
	cfg := line.CRIConfig(d, c.sock) + fmt.Sprintf(`[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = %q
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'
`, pauseImage)
	cfg = strings.Replace(cfg, "[plugins.'io.containerd.cri.v1.runtime']\n", "[plugins.'io.containerd.cri.v1.runtime']\n  restrict_oom_score_adj = true\n", 1)
	file := filepath.Join(d, "config.toml")
	if err := os.MkdirAll(d, 0o711); err != nil {
		return err
	}
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		return err
	}
	p, err := c.inNS("containerd", bin, "--config", file)
	if err != nil {
		return err
	}
	c.defer_(func() error {
		_, rmErr := c.crictl("rmp", "-fa")
		return errors.Join(rmErr, p.stop(15*time.Second))
	})
	return waitFor(line.Name+" containerd to answer on "+c.sock, time.Minute, func() (bool, error) {
		_, err := c.crictl("version")
		return err == nil, err
	}, p)
}

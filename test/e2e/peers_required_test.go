package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/report"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// TestPullRequiredFromPeers: two nodes, each running `holdfast run`; B's
// with --pull-required, given a required set naming an image neither holds.
// An archive of it dropped into A's images dir is imported there, and B pulls
// it from A's spegel through its own, pins it and leases it as its peer
// source; it stays complete on B once A's archive is deleted, A's agent has
// released it and A's copy is collected; and once no workload needs it, B
// releases it after the grace period.
func TestPullRequiredFromPeers(t *testing.T) {
	a, b := peerPair(t, startPeerNode)
	ns := a.ns

	needed := build(t, fixture.ImageSpec{Names: []string{peerRegistryHost + "/peers/needed:1"}})
	name := needed.Names[0]
	aImages := filepath.Join(tempDir(t), "images")
	agentA := startAgentIn(t, ns, a.daemon, a.dataDir, []string{aImages}, "--settle", "200ms")
	// B enforces a signature policy for e2e.local/sig/*, which needed:1 is not.
	scene := writeSignedScene(t, filepath.Join(tempDir(t), "scene"))
	policy := scene.writePolicy(t, "enforce")
	agent := startAgentIn(t, ns, b.daemon, b.dataDir, []string{filepath.Join(tempDir(t), "images")},
		"--pull-required", "--peer-grace", "3s", "--settle", "200ms", "--policy", policy,
		// B's agent writes its own mirror config: e2e.local through B's spegel,
		// then the registry itself, which resolves nowhere here.
		"--registry-config", filepath.Join(tempDir(t), "certs.d"),
		"--peer-mirror", fmt.Sprintf("http://%s:%d", b.addr, testenv.SpegelRegistryPort), "--peer-registries", peerRegistryHost,
		"--pull-timeout", "10s")
	peerList := filepath.Join(b.dataDir, "peers", "required.txt")
	agent.put(t, "/required", `{"images":[{"ref":"`+name+`","usedBy":["Deployment shop/app containers/app"]}]}`)
	if r := agentReport(t, agent).Required; r == nil || r.Pulling != 1 || len(r.NotReady) != 1 || !r.NotReady[0].Pulling {
		t.Errorf("B's report before the archive comes: %+v, want the image missing and being pulled from peers", r)
	}
	// The archive comes to A. B's pull may come before A has imported it, or
	// before spegel's routing table has A: it is tried again with backoff,
	// like a pull list's.
	start := time.Now()
	archive := filepath.Join(aImages, "needed.tar")
	writeArchive(t, archive, fixture.None, fixture.CompressOptions{},
		func(ctx context.Context, w io.Writer) error { return fixture.WriteDockerSave(ctx, w, needed) })
	deadline := time.Now().Add(2 * time.Minute)
	for !b.isPinned(t, name) {
		if time.Now().After(deadline) {
			t.Fatalf("B did not pin %s from its peers in 2 minutes\nA's agent:\n%s\nB's agent:\n%s", name, tail(agentA.dump(), 20), tail(agent.dump(), 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("B pinned %s from its peers %s after the archive was written on A", name, time.Since(start).Round(time.Millisecond))
	if l := leaseOf(t, b, peerList); l == "" {
		t.Errorf("B holds no lease of the peer source %s: %v", peerList, b.holdfastLeases(t))
	}
	var st struct {
		Images []struct {
			Name    string   `json:"name"`
			Pinned  bool     `json:"pinned"`
			Sources []string `json:"sources"`
		} `json:"images"`
	}
	readStatus(t, &st, "--address", b.Address, "--data-dir", b.dataDir)
	named := false
	for _, img := range st.Images {
		if img.Name == name {
			named = img.Pinned && slices.Contains(img.Sources, peerList)
		}
	}
	if !named {
		t.Errorf("B's status does not show %s pinned by the peer source %s: %+v", name, peerList, st.Images)
	}
	if !strings.Contains(readFile(t, b.spegel), needed.Target.Digest.String()) {
		t.Errorf("B's spegel log does not name %s: the pull did not go through it", needed.Target.Digest)
	}
	host := b.hostBlobs(t, needed.Target)
	if log := readFile(t, a.spegel); !strings.Contains(log, "/v2/peers/needed/blobs/"+host[len(host)-1].Digest.String()) {
		t.Errorf("A's spegel log does not show it served %s:\n%s", host[len(host)-1].Digest, tail(log, 20))
	}
	eventually(t, "B's report ready", func() bool {
		r := agentReport(t, agent).Required
		return r != nil && r.Ready && r.Counts[report.Pinned] == 1
	})

	// A loses its copy: the archive deleted, its agent releases it, and its
	// records go (as the kubelet's image GC would take them), content collected.
	if err := os.Remove(archive); err != nil {
		t.Fatal(err)
	}
	eventually(t, "A's agent to release the archive", func() bool { return leaseOf(t, a, archive) == "" })
	ctx := a.ctx()
	for _, n := range a.recordNames(t) {
		if err := a.Client.ImageService().Delete(ctx, n, images.SynchronousDelete()); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range host {
		if a.hasBlob(t, d.Digest) {
			t.Fatalf("A still holds %s after its records and leases went", d.Digest)
		}
	}
	for _, d := range host {
		if !b.hasBlob(t, d.Digest) {
			t.Errorf("B lacks %s once A's copy is gone", d.Digest)
		}
	}
	if !b.isPinned(t, name) {
		t.Errorf("B unpinned %s once A's copy is gone", name)
	}

	// No workload needs it any more: released after the grace period.
	left := time.Now() // before the agent's grace clock starts, however slow the PUT
	agent.put(t, "/required", `{"images":[]}`)
	if !b.isPinned(t, name) {
		t.Fatalf("B unpinned %s at once, before the grace period", name)
	}
	eventually(t, "B's peer source released", func() bool {
		return !b.isPinned(t, name) && leaseOf(t, b, peerList) == ""
	})
	if waited := time.Since(left); waited < 3*time.Second {
		t.Errorf("released %s after %s, within the grace period of 3s", name, waited)
	}

	// A signed image whose signature came inside the archive on A: B's pull
	// through the peers brings the image but no signature (spegel serves the
	// cosign tag only where a record of it exists), and B's policy refuses
	// it: no name on B, and the report says why.
	if err := os.Rename(scene.archive, filepath.Join(aImages, filepath.Base(scene.archive))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "A to pin the signed image", func() bool { return a.isPinned(t, scene.signed) })
	agent.put(t, "/required", `{"images":[{"ref":"`+scene.signed+`"}]}`)
	eventually(t, "B to refuse the signed image it pulled from its peers", func() bool {
		return agent.logged("refused", map[string]string{"name": scene.signed, "source": peerList}) > 0
	})
	if _, ok := b.record(t, scene.signed); ok {
		t.Errorf("B holds a record of %s, which its policy refuses", scene.signed)
	}
	eventually(t, "B's report to say the policy refused it", func() bool {
		r := agentReport(t, agent).Required
		return r != nil && len(r.NotReady) == 1 && r.NotReady[0].Pulling && strings.HasPrefix(r.NotReady[0].PullError, "refused by the signature policy")
	})
}

// spegelBin is the spegel binary on PATH, or the test is skipped saying so.
func spegelBin(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("spegel")
	if err != nil {
		testenv.Missing(t, "spegel", "spegel is not on PATH (make deps builds it into bin/: scripts/spegel.sh): "+err.Error())
	}
	return p
}

// leaseOf is the ID of the node's lease of the source at path, "" if none.
func leaseOf(t *testing.T, n *peerNode, path string) string {
	t.Helper()
	for _, l := range n.holdfastLeases(t) {
		if l.Labels[hfruntime.LabelSource] == path {
			return l.ID
		}
	}
	return ""
}

// agentReport is the agent's GET /report.
func agentReport(t *testing.T, a *agentProc) report.Report {
	t.Helper()
	code, body := a.get(t, "/report")
	var r report.Report
	if err := json.Unmarshal([]byte(body), &r); code != 200 || err != nil {
		t.Fatalf("GET /report: %d %v\n%s", code, err, body)
	}
	return r
}

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/imageset"
	"github.com/holdfast-project/holdfast/internal/report"
)

// The ImageSet steps of TestTwoNodes: imgStaged is an image only node 1's archive holds, imgNowhere one no
// node holds; testPeerGrace is the chart's --peer-grace in this test.
const (
	imgStaged     = peerRegistry + "/staged:1"
	imgNowhere    = peerRegistry + "/nowhere:1"
	testPeerGrace = 20 * time.Second
)

// kubectl runs the cluster's kubectl as the admin.
func (c *cluster) kubectl(args ...string) (string, error) {
	return run(append([]string{filepath.Join(c.k8sBin, "kubectl"), "--kubeconfig", c.admin}, args...)...)
}

// applySet creates (or replaces) the ImageSet name of images with kubectl, as an operator would.
func (c *cluster) applySet(t *testing.T, name string, images ...string) {
	t.Helper()
	set := map[string]any{"apiVersion": report.APIVersion, "kind": imageset.Kind,
		"metadata": map[string]any{"name": name}, "spec": map[string]any{"images": images}}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(c.dir, "imageset-"+name+".json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := c.kubectl("apply", "-f", path); err != nil {
		t.Fatalf("kubectl apply the ImageSet %s: %v\n%s", name, err, out)
	}
}

// imageSet reads the ImageSet name.
func (c *cluster) imageSet(name string) (imageset.ImageSet, error) {
	var set imageset.ImageSet
	raw, err := c.client.CoreV1().RESTClient().Get().AbsPath(imageset.Path, name).DoRaw(context.Background())
	if err != nil {
		return set, err
	}
	return set, json.Unmarshal(raw, &set)
}

func setCondition(st imageset.Status, typ string) imageset.Condition {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return imageset.Condition{}
}

// imageSetMissingEverywhere: a set naming an image no node holds is Progressing, its reason and message naming
// the image as missing everywhere, the image missing on both nodes; kubectl wait for Staged times out, and
// check --cluster shows the set.
func (s *scenario) imageSetMissingEverywhere(t *testing.T) {
	c := s.c
	const name = "release-nowhere"
	c.applySet(t, name, imgNowhere)
	t.Cleanup(func() {
		if out, err := c.kubectl("delete", "imageset", name, "--wait"); err != nil {
			t.Errorf("kubectl delete imageset %s: %v\n%s", name, err, out)
		}
	})
	var last imageset.ImageSet
	if err := waitFor("the set Progressing, missing everywhere", 2*time.Minute, func() (bool, error) {
		set, err := c.imageSet(name)
		if err != nil {
			return false, err
		}
		last = set
		p := setCondition(set.Status, imageset.Progressing)
		ok := p.Status == imageset.True && p.Reason == "MissingEverywhere" && strings.Contains(p.Message, imgNowhere) &&
			len(set.Status.Missing) == 1 && set.Status.Missing[0].Image == imgNowhere && set.Status.Missing[0].Nodes == 2
		return ok, fmt.Errorf("status %+v", set.Status)
	}); err != nil {
		t.Fatalf("%v\n%s", err, s.reporterLogs(t))
	}
	if st := setCondition(last.Status, imageset.Staged); st.Status != imageset.False {
		t.Errorf("Staged %+v, want False", st)
	}
	if out, err := c.kubectl("wait", "--for=condition=Staged", "imageset/"+name, "--timeout=5s"); err == nil {
		t.Errorf("kubectl wait for Staged of a set no node can stage returned 0:\n%s", out)
	}
	s.waitCheckCluster(t, "the set missing everywhere", 0, []string{name, imgNowhere}, nil)
}

// imageSetStaged: a set naming an image only node 1's archive holds: kubectl wait --for=condition=Staged returns;
// node 2 holds it pinned, leased by the set's own source; kubectl get imagesets shows it staged on both nodes.
// Then a pull list in node 2's images dir names the same image, and the set is deleted: after the grace the set's
// source is gone on node 2, and the image stays pinned there (the list wants it) and on node 1 (its archive
// does); once the list goes too, node 2 lets it go.
func (s *scenario) imageSetStaged(t *testing.T, n *node2) {
	c := s.c
	const name = "release-1"
	archive := filepath.Join(c.imagesDir, "staged.tar")
	if err := writeStaticImage(archive, imgStaged, filepath.Join(c.k8sBin, "pause"), "/pause",
		map[string]string{"holdfast.test": imgStaged}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(archive); err != nil {
			t.Error(err)
		}
		if err := waitFor("node 1's agent to unpin "+imgStaged, time.Minute, func() (bool, error) {
			pinned, err := c.criPinned(imgStaged)
			return err == nil && !pinned, err
		}); err != nil {
			t.Error(err)
		}
		for _, crictl := range []func(...string) (string, error){c.crictl, n.crictl} {
			_, _ = crictl("rmi", imgStaged)
		}
	})
	if err := waitFor(imgStaged+" pinned on node 1", time.Minute, func() (bool, error) { return c.criPinned(imgStaged) }); err != nil {
		t.Fatalf("%v\n%s", err, s.agentLogs())
	}
	start := time.Now()
	c.applySet(t, name, imgStaged)
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			_, _ = c.kubectl("delete", "imageset", name)
		}
	})
	if out, err := c.kubectl("wait", "--for=condition=Staged", "imageset/"+name, "--timeout=3m"); err != nil {
		set, _ := c.imageSet(name)
		t.Fatalf("kubectl wait for Staged: %v\n%s\nstatus %+v\n%s\n%s", err, out, set.Status, s.reporterLogs(t), s.agentLogs())
	}
	t.Logf("kubectl wait --for=condition=Staged returned %.1fs after the set was applied", time.Since(start).Seconds())
	if pinned, found, err := criImageVia(n.crictl, imgStaged); err != nil || !found || !pinned {
		t.Errorf("%s on node 2: found %v, pinned %v (%v)", imgStaged, found, pinned, err)
	}
	setSource := filepath.Join(s.dataDir, "peers", "sets", name+".txt")
	if srcs := n.sourcesOf(t, imgStaged); !slices.Contains(srcs, setSource) {
		t.Errorf("node 2's sources of %s: %v, want the set's own %s", imgStaged, srcs, setSource)
	}
	out, err := c.kubectl("get", "imagesets", name)
	if err != nil {
		t.Fatalf("kubectl get imagesets: %v\n%s", err, out)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 ||
		!slices.Equal(strings.Fields(lines[0]), []string{"NAME", "STAGED", "NODES", "STAGED-NODES", "FAILED", "MISSING", "AGE"}) ||
		!slices.Equal(strings.Fields(lines[1])[:6], []string{name, "True", "2", "2", "0", "0"}) {
		t.Errorf("kubectl get imagesets:\n%s\nwant the columns and %s staged on 2 of 2 nodes", out, name)
	}
	s.waitCheckCluster(t, "the set staged", 0, []string{name}, nil)

	list := filepath.Join(c.imagesDir, "staged.txt")
	if err := os.WriteFile(n.path(list), []byte(imgStaged+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	listed := true
	t.Cleanup(func() {
		if listed {
			_ = os.Remove(n.path(list))
		}
	})
	if err := waitFor("node 2's pull list naming "+imgStaged+" as its source", time.Minute, func() (bool, error) {
		srcs := n.sourcesOf(t, imgStaged)
		return slices.Contains(srcs, list), fmt.Errorf("sources %v", srcs)
	}); err != nil {
		t.Fatal(err)
	}
	if out, err := c.kubectl("delete", "imageset", name, "--wait"); err != nil {
		t.Fatalf("kubectl delete imageset %s: %v\n%s", name, err, out)
	}
	deleted = true
	gone := time.Now()
	if err := waitFor("node 2 releasing the set's source", testPeerGrace+time.Minute, func() (bool, error) {
		srcs := n.sourcesOf(t, imgStaged)
		return !slices.Contains(srcs, setSource), fmt.Errorf("sources %v", srcs)
	}); err != nil {
		t.Fatalf("%v\n%s", err, s.agentLogs())
	}
	if held := time.Since(gone); held < testPeerGrace {
		t.Errorf("node 2 released the set's source %.1fs after the set was deleted, before the grace of %s", held.Seconds(), testPeerGrace)
	}
	if _, err := os.Stat(n.path(setSource)); !os.IsNotExist(err) {
		t.Errorf("the set's list on node 2 after its release: %v, want it gone", err)
	}
	for node, crictl := range map[string]func(...string) (string, error){"node 1": c.crictl, "node 2": n.crictl} {
		if pinned, found, err := criImageVia(crictl, imgStaged); err != nil || !found || !pinned {
			t.Errorf("%s on %s after the set went: found %v, pinned %v (%v); another source wants it", imgStaged, node, found, pinned, err)
		}
	}
	if err := os.Remove(n.path(list)); err != nil {
		t.Fatal(err)
	}
	listed = false
	if err := waitFor("node 2 to unpin "+imgStaged+" once nothing wants it", 2*time.Minute, func() (bool, error) {
		pinned, _, err := criImageVia(n.crictl, imgStaged)
		return err == nil && !pinned, err
	}); err != nil {
		t.Errorf("%v\n%s", err, s.agentLogs())
	}
}

// sourcesOf is the sources node 2's holdfast status gives the image ref.
func (n *node2) sourcesOf(t *testing.T, ref string) []string {
	t.Helper()
	out, err := n.holdfast("status", "-o", "json")
	if err != nil {
		t.Fatalf("holdfast status on node 2: %v\n%s", err, out)
	}
	var st struct {
		Images []struct {
			Name    string   `json:"name"`
			Sources []string `json:"sources"`
		} `json:"images"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("holdfast status on node 2: %v\n%s", err, out)
	}
	for _, img := range st.Images {
		if img.Name == ref {
			return img.Sources
		}
	}
	return nil
}

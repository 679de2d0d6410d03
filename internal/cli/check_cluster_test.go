package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/imageset"
	"github.com/holdfast-project/holdfast/internal/kubeapi"
	"github.com/holdfast-project/holdfast/internal/kubelet"
	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/workload"
)

func node(t *testing.T, name string, labels map[string]string, condStatus string) kubeapi.Node {
	t.Helper()
	raw := map[string]any{"metadata": map[string]any{"name": name, "labels": labels}}
	if condStatus != "" {
		raw["status"] = map[string]any{"conditions": []map[string]string{
			{"type": "Ready", "status": "True"},
			{"type": report.ImagesConditionType, "status": condStatus, "reason": "ImagesMissing", "message": "1 missing: x\nmore"},
		}}
	}
	b, _ := json.Marshal(raw)
	var n kubeapi.Node
	if err := json.Unmarshal(b, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func heldReport(name string, held report.Held, rep *report.Required) report.NodeImages {
	return report.NodeImages{Metadata: report.ObjectMeta{Name: name}, Images: len(held), Held: held.Pack(), Required: rep}
}

const clusterManifests = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  template:
    spec:
      containers: [{name: a, image: a:1}, {name: b, image: b:1}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: gpu, namespace: sys}
spec:
  template:
    spec:
      nodeSelector: {gpu: "yes"}
      containers: [{name: g, image: g:1}]
---
apiVersion: v1
kind: Pod
metadata: {name: tool, namespace: shop}
spec:
  containers: [{name: c, image: "c@` + "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc" + `"}]
`

// TestJudgeCluster: with manifests, each node judges the images that may
// run on it against what its report says it holds; without, its report's
// own judgment speaks, cut list counted; a node without a report is not
// ready and says its condition.
func TestJudgeCluster(t *testing.T) {
	var set workload.Set
	set.Read("release.yaml", []byte(clusterManifests))
	if len(set.Errors) > 0 {
		t.Fatal(set.Errors)
	}
	other := digest.FromString("other c").String()
	a := report.HeldImage{Name: "docker.io/library/a:1", Digest: digest.FromString("a").String(), Pinned: true}
	nodes := []kubeapi.Node{
		node(t, "node-b", map[string]string{"kubernetes.io/os": "linux"}, "True"),
		node(t, "node-a", map[string]string{"gpu": "yes"}, "False"),
		node(t, "node-c", nil, "False"),
	}
	reports := map[string]report.NodeImages{
		"node-a": heldReport("node-a", report.Held{a, {Name: "docker.io/library/b:1", Digest: digest.FromString("b").String()}},
			&report.Required{Known: true, Counts: map[report.State]int{"pinned": 40, "missing": 3, "present": 2},
				NotReady: report.Rows{{Ref: "docker.io/library/x:1", UsedBy: []string{"Deployment a/x containers/x"}, State: "missing"}}}),
		"node-b": heldReport("node-b", report.Held{a, {Name: "docker.io/library/c@" + other, Digest: other, Pinned: true}},
			&report.Required{Known: true, Ready: true, Counts: map[report.State]int{"pinned": 7}}),
	}

	r, errs := judgeCluster(nodes, reports, &set, false)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	states := func(n workload.ClusterNode) map[string]report.State {
		out := map[string]report.State{}
		for _, img := range n.NotReady {
			out[img.Ref] = img.State
		}
		return out
	}
	if len(r.Nodes) != 3 || r.Nodes[0].Name != "node-a" || r.Nodes[2].Name != "node-c" {
		t.Fatalf("nodes %+v, want node-a, node-b, node-c", r.Nodes)
	}
	na, nb, nc := r.Nodes[0], r.Nodes[1], r.Nodes[2]
	cRef := "docker.io/library/c@sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
	if s := states(na); na.Ready || len(s) != 3 || s["docker.io/library/b:1"] != "present" || s["docker.io/library/g:1"] != "missing" ||
		s[cRef] != "missing" || na.Counts["pinned"] != 1 {
		t.Errorf("node-a: %+v", na)
	}
	if s := states(nb); nb.Ready || len(s) != 2 || s["docker.io/library/b:1"] != "missing" || s[cRef] != "mismatch" {
		t.Errorf("node-b (no gpu: g:1 not judged): %+v", nb)
	}
	if nc.Report || nc.Ready || nc.Condition == nil || nc.Condition.Status != "False" {
		t.Errorf("node-c: %+v", nc)
	}
	if r.Totals != (workload.ClusterTotals{Nodes: 3, Lacking: 2, NoReport: 1, Missing: 4, Unpinned: 1}) || !r.Manifests {
		t.Errorf("totals %+v", r.Totals)
	}
	if !clusterFailed(r) {
		t.Error("not failed")
	}
	// b:1 is missing on node-b and node-a holds it: a peer can serve it.
	if want := []string{cRef, "docker.io/library/g:1"}; !slices.Equal(r.Nowhere, want) {
		t.Errorf("held nowhere: %v, want %v", r.Nowhere, want)
	}
	var b bytes.Buffer
	if err := writeCluster(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"node-a  docker.io/library/g:1", "missing   release.yaml#2 DaemonSet sys/gpu containers/g",
		"node-b  " + cRef + "  mismatch", "node-c  -", "no report; HoldfastImagesReady False ImagesMissing: 1 missing: x\n",
		"3 nodes: 0 ready, 2 lacking images (4 missing, 1 unpinned), 1 without a report",
		"2 missing images no node holds (no peer can serve them: carry them in an archive): " + cRef + ", docker.io/library/g:1\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}

	// Without manifests: the reports' own judgments; node-a lists one of
	// its five, the other four counted as cut. --allow-unpinned does not
	// make node-a ready: it misses 3.
	r, _ = judgeCluster(nodes, reports, nil, true)
	na, nb = r.Nodes[0], r.Nodes[1]
	if na.Ready || na.Cut != 4 || len(na.NotReady) != 1 || na.NotReady[0].UsedBy[0] != "Deployment a/x containers/x" || na.Counts["missing"] != 3 {
		t.Errorf("node-a from its report: %+v", na)
	}
	if !nb.Ready || nb.Counts["pinned"] != 7 || r.Manifests {
		t.Errorf("node-b from its report: %+v", nb)
	}
	if want := []string{"docker.io/library/x:1"}; !slices.Equal(r.Nowhere, want) {
		t.Errorf("held nowhere, from the reports: %v, want %v", r.Nowhere, want)
	}
	if r.Totals != (workload.ClusterTotals{Nodes: 3, Ready: 1, Lacking: 1, NoReport: 1, Missing: 3, Unpinned: 2}) {
		t.Errorf("totals %+v", r.Totals)
	}

	// A report whose held images do not unpack: an error naming the node,
	// and the node counts as without a report.
	bad := reports["node-b"]
	bad.Held = []byte("not gzip")
	reports["node-b"] = bad
	r, errs = judgeCluster(nodes, reports, &set, false)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "NodeImages node-b") || r.Nodes[1].Report || r.Totals.NoReport != 2 {
		t.Errorf("a broken report: %v, %+v", errs, r.Nodes[1])
	}
}

// BenchmarkJudgeCluster: check --cluster -f's judgment of 1,000 nodes, each
// holding 500 images (a tag and a digest record each), for a release of 200
// images of which every node lacks 20; the NodeImages objects' JSON decoded
// as the command reads them. pool: every node holds the same; distinct:
// each lacks one more image, its own, so that no two are judged alike.
func BenchmarkJudgeCluster(b *testing.B) {
	var manifests strings.Builder
	for i := range 200 {
		fmt.Fprintf(&manifests, "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: app-%03d, namespace: shop}\nspec:\n  template:\n    spec:\n      containers: [{name: app, image: registry.example.com/team/service-%03d:v1}]\n", i, i)
	}
	var set workload.Set
	set.Read("release.yaml", []byte(manifests.String()))
	heldBut := func(skip int) report.Held {
		var held report.Held
		for i := 20; i < 520; i++ {
			if i == skip {
				continue
			}
			repo := fmt.Sprintf("registry.example.com/team/service-%03d", i)
			d := digest.FromString(repo).String()
			held = append(held, report.HeldImage{Name: repo + ":v1", Digest: d, Pinned: true}, report.HeldImage{Name: repo + "@" + d, Digest: d, Pinned: true})
		}
		held.Sort()
		return held
	}
	for _, distinct := range []bool{false, true} {
		name := "pool"
		if distinct {
			name = "distinct"
		}
		b.Run(name, func(b *testing.B) {
			var nodes []kubeapi.Node
			var raw [][]byte
			size := 0
			pool := heldBut(-1)
			for i := range 1000 {
				n := kubeapi.Node{}
				n.Name = fmt.Sprintf("node-%04d", i)
				nodes = append(nodes, n)
				held := pool
				if distinct {
					held = heldBut(20 + i%500)
				}
				obj := heldReport(n.Name, held, &report.Required{Known: true, Ready: true})
				obj.HeldHash = held.Hash()
				j, _ := json.Marshal(obj)
				raw = append(raw, j)
				size += len(j)
			}
			for b.Loop() {
				reports := map[string]report.NodeImages{}
				for _, r := range raw {
					var ni report.NodeImages
					if err := json.Unmarshal(r, &ni); err != nil {
						b.Fatal(err)
					}
					reports[ni.Metadata.Name] = ni
				}
				r, errs := judgeCluster(nodes, reports, &set, false)
				if len(errs) > 0 || r.Totals.Lacking != 1000 || r.Totals.Missing < 20*1000 {
					b.Fatalf("%v %+v", errs, r.Totals)
				}
			}
			b.ReportMetric(float64(size), "objects-bytes")
		})
	}
}

// TestJudgeClusterImageVolume: an image volume is judged on the nodes its
// pod may run on, as a container's image is.
func TestJudgeClusterImageVolume(t *testing.T) {
	var set workload.Set
	set.Read("ml.yaml", []byte(checkImageVolume))
	if len(set.Errors) > 0 {
		t.Fatal(set.Errors)
	}
	server := report.HeldImage{Name: "registry.example.com/ml/server:1", Digest: digest.FromString("server").String(), Pinned: true}
	tools := report.HeldImage{Name: "registry.example.com/ml/tools:2", Digest: digest.FromString("tools").String(), Pinned: true}
	nodes := []kubeapi.Node{node(t, "gpu-1", map[string]string{"gpu": "yes"}, ""), node(t, "cpu-1", map[string]string{}, "")}
	reports := map[string]report.NodeImages{
		"gpu-1": heldReport("gpu-1", report.Held{server, tools}, nil),
		"cpu-1": heldReport("cpu-1", report.Held{server, tools}, nil),
	}
	r, errs := judgeCluster(nodes, reports, &set, false)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	cpu, gpu := r.Nodes[0], r.Nodes[1]
	if len(gpu.NotReady) != 1 || gpu.NotReady[0].Ref != "registry.example.com/ml/model:7" || gpu.NotReady[0].State != "missing" || gpu.Ready {
		t.Errorf("gpu-1: %+v, want the model volume missing", gpu)
	}
	if !cpu.Ready || cpu.Counts["pinned"] != 2 {
		t.Errorf("cpu-1 (the Deployment cannot land there): %+v", cpu)
	}
}

// TestClusterForcedPulls: with a kubelet configuration given, the images of
// the manifests it would have the kubelet pull again are listed with the
// nodes that hold them; a node that lacks one already says it is missing.
func TestClusterForcedPulls(t *testing.T) {
	var set workload.Set
	set.Read("ml.yaml", []byte(checkImageVolume))
	kc, err := kubelet.Load([]string{writeFile(t, "config.yaml", []byte(kubeletAlwaysVerify))})
	if err != nil {
		t.Fatal(err)
	}
	server := report.HeldImage{Name: "registry.example.com/ml/server:1", Digest: digest.FromString("server").String(), Pinned: true}
	model := report.HeldImage{Name: "registry.example.com/ml/model:7", Digest: digest.FromString("model").String()}
	nodes := []kubeapi.Node{node(t, "gpu-1", map[string]string{"gpu": "yes"}, ""), node(t, "gpu-2", map[string]string{"gpu": "yes"}, ""), node(t, "cpu-1", map[string]string{}, "")}
	reports := map[string]report.NodeImages{
		"gpu-1": heldReport("gpu-1", report.Held{server, model}, nil),
		"gpu-2": heldReport("gpu-2", report.Held{server}, nil),
		"cpu-1": heldReport("cpu-1", report.Held{server, model}, nil),
	}
	r, errs := judgeCluster(nodes, reports, &set, false)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	got := map[string]string{}
	for _, f := range r.Cluster.ForcedPulls(&set, kc.ForcedPull) {
		got[f.Ref] = strings.Join(f.Nodes, ",")
		if f.Policy != "AlwaysVerify" || f.Message == "" {
			t.Errorf("%s: %+v", f.Ref, f.ForcedPull)
		}
	}
	// The model: on gpu-1 (cpu-1 holds it, but the Deployment cannot land
	// there; gpu-2 lacks it). The server: on every node, for the bare Pod.
	want := map[string]string{"registry.example.com/ml/model:7": "gpu-1", "registry.example.com/ml/server:1": "cpu-1,gpu-1,gpu-2"}
	if len(got) != len(want) || got["registry.example.com/ml/model:7"] != want["registry.example.com/ml/model:7"] ||
		got["registry.example.com/ml/server:1"] != want["registry.example.com/ml/server:1"] {
		t.Errorf("forced pulls %v, want %v", got, want)
	}
}

// TestWriteSets: each ImageSet's block says Staged and why, the node
// counts, the first missing images with the first nodes that lack them and
// how many more, the first failures and how many more, Progressing while
// true; a set whose status is not current says so; the sets change no exit
// status, and the JSON carries them as imageSets.
func TestWriteSets(t *testing.T) {
	set := imageset.ImageSet{Spec: imageset.Spec{Images: make([]string, 8)}}
	set.Metadata.Name, set.Metadata.Generation = "release-7", 2
	st := &set.Status
	st.Conditions = []imageset.Condition{
		{Type: imageset.Staged, Status: imageset.False, Reason: "ImagesMissing", ObservedGeneration: 2},
		{Type: imageset.Progressing, Status: imageset.True, Reason: "Failing", Message: "2 nodes failed to pull\nsecond line", ObservedGeneration: 2},
	}
	st.Nodes = imageset.NodeCounts{Selected: 40, Staged: 30, Failed: 7}
	st.MissingImages, st.FailureCount = 7, 9
	for i := range 7 {
		var names []string
		for j := range min(10, 20+i) {
			names = append(names, fmt.Sprintf("node-%02d", j))
		}
		st.Missing = append(st.Missing, imageset.MissingImage{Image: fmt.Sprintf("registry.example.com/app-%d:1", i), Nodes: 20 + i, NodeNames: names})
		st.Failures = append(st.Failures, imageset.Failure{Node: fmt.Sprintf("node-%02d", i), Image: "registry.example.com/app-0:1", Error: "no peer serves it\nat all"})
	}
	stale := set
	stale.Metadata.Name, stale.Metadata.Generation = "release-8", 3
	fresh := imageset.ImageSet{}
	fresh.Metadata.Name, fresh.Metadata.Generation = "release-9", 1

	r := ClusterReport{Cluster: workload.Cluster{Nodes: []workload.ClusterNode{{Name: "node-00", Report: true, Ready: true}}}}
	r.ImageSets = workload.JudgeSets([]imageset.ImageSet{fresh, stale, set})
	var b bytes.Buffer
	if err := writeCluster(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"ImageSet release-7 (8 images): Staged False (ImagesMissing), nodes 30 staged of 40 selected, 7 failed; 7 images missing\n",
		"  Progressing (Failing): 2 nodes failed to pull\n",
		"  missing  registry.example.com/app-0:1  on 20 nodes: node-00, node-01, node-02 and 17 more\n",
		"  missing  registry.example.com/app-4:1  on 24 nodes: node-00, node-01, node-02 and 21 more\n",
		"  missing  (and 2 more images)\n",
		"  failed  node-04  registry.example.com/app-0:1: no peer serves it\n",
		"  failed  (and 4 more failures)\n",
		"ImageSet release-8 (8 images): Staged False (ImagesMissing), nodes 30 staged of 40 selected, 7 failed; 7 images missing\n" +
			"  status of generation 2, spec at 3: not yet aggregated: is a reporter elected?\n",
		"ImageSet release-9 (0 images): no status yet: not yet aggregated: is a reporter elected?\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "app-5:1") || strings.Contains(out, "failed  node-05") || strings.Index(out, "release-7") > strings.Index(out, "release-8") {
		t.Errorf("more than the first 5 listed, or out of order:\n%s", out)
	}
	if clusterFailed(r) {
		t.Error("the sets' progress failed the check")
	}
	j, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		ImageSets []workload.ClusterSet `json:"imageSets"`
	}
	if err := json.Unmarshal(j, &back); err != nil || len(back.ImageSets) != 3 || len(back.ImageSets[1].Missing) != 7 || back.ImageSets[2].Current {
		t.Errorf("JSON imageSets: %v, %+v", err, back.ImageSets)
	}
}

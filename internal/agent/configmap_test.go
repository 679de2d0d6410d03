package agent

import (
	"path/filepath"
	"testing"

	"github.com/holdfast-project/holdfast/internal/fixture"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/source"
	"github.com/holdfast-project/holdfast/internal/testenv/testimage"
)

// configMapFiles are the keys of a ConfigMap as the chart writes it.
func configMapFiles(pins string) map[string][]byte {
	return map[string][]byte{"cluster.pins": []byte(pins), source.Marker: []byte("marker\n")}
}

// TestAgentConfigMapPins: an agent with a ConfigMap volume among its images
// dirs applies the pin list the kubelet swaps in: the new pattern's image is
// pinned, the one no pattern names any more is unpinned.
func TestAgentConfigMapPins(t *testing.T) {
	t.Parallel()
	rt := fake.New()
	a, b := testimage.Stored(t, rt, "example.com/a:1"), testimage.Stored(t, rt, "example.com/b:1")
	for _, w := range []hfruntime.Want{a, b} {
		rt.Create(hfruntime.Image{Name: w.Name, Target: w.Target})
	}
	dir := filepath.Join(t.TempDir(), "cluster")
	if err := fixture.ConfigMapDir(dir, configMapFiles("example.com/a:1\n")); err != nil {
		t.Fatal(err)
	}
	pinned := func(name string) bool { rec, ok := rt.Record(name); return ok && rec.Pinned() && rec.Owned() }
	logs := runFakeAgent(t, rt, dirsConfig(dir), newFakeClock())
	if !pinned(a.Name) || pinned(b.Name) {
		t.Fatalf("first pass: a pinned %v, b pinned %v; want a alone\n%s", pinned(a.Name), pinned(b.Name), logs)
	}
	if err := fixture.ConfigMapDir(dir, configMapFiles("example.com/b:1\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b pinned and a unpinned after the swap", func() bool { return pinned(b.Name) && !pinned(a.Name) })
	if rec, ok := rt.Record(a.Name); !ok || rec.Labels[hfruntime.LabelPinned] != "" {
		t.Errorf("a after the swap: present %v, labels %v; want the record kept, unpinned", ok, rec.Labels)
	}
}

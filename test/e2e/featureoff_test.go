package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// TestMissingNodePathsTurnFeaturesOff: an optional path that is missing on
// the node (a registries.yaml, a content root that is not containerd's)
// turns its feature off with a warning naming it, and the rest runs. sync
// exits 0 and drops the mirrors an earlier registries.yaml wrote; run (with
// either write path) becomes ready and its /report carries a FeatureOff
// Warning for each.
func TestMissingNodePathsTurnFeaturesOff(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeDockerSave(t, filepath.Join(imagesDir, "app.tar"), build(t, fixture.ImageSpec{Names: []string{"e2e.local/featureoff/app:1"}}))
	regYAML := filepath.Join(filepath.Dir(dataDir), "etc", "registries.yaml")
	if err := os.MkdirAll(filepath.Dir(regYAML), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(regYAML, []byte("mirrors:\n  mirror.example.com:\n    endpoint:\n      - \"http://127.0.0.1:1\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hosts := func() []string {
		m, err := filepath.Glob(filepath.Join(dataDir, "registry.d", "*", "hosts.toml"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	sync := func() result {
		return holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--registries-yaml", regYAML)
	}
	if res := sync(); res.Code != 0 || len(hosts()) != 1 {
		t.Fatalf("sync with %s exited %d and wrote hosts.toml files %q; want 0 and one\n%s", regYAML, res.Code, hosts(), tail(res.Stderr, 10))
	}

	if err := os.Remove(regYAML); err != nil {
		t.Fatal(err)
	}
	res := sync()
	if res.Code != 0 || !strings.Contains(res.Stderr, "registries.yaml "+regYAML+" does not exist") {
		t.Errorf("sync without %s exited %d; want 0 and a warning naming it\n%s", regYAML, res.Code, tail(res.Stderr, 10))
	}
	if h := hosts(); len(h) != 0 {
		t.Errorf("the mirror of the missing registries.yaml is still configured: %q", h)
	}
	d.requirePinned(t, "e2e.local/featureoff/app:1")

	// Not containerd's content store: an empty dir where one was expected.
	notRoot := filepath.Join(filepath.Dir(dataDir), "elsewhere", "io.containerd.content.v1.content")
	if err := os.MkdirAll(notRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	// auto: direct writes are off; stream: the checks that read the dir.
	for _, wp := range []string{"auto", "stream"} {
		agent := startAgent(t, d, dataDir, []string{imagesDir}, "--registries-yaml", regYAML, "--content-root", notRoot, "--write-path", wp)
		var r reportJSON
		eventually(t, "the agent ready", func() bool {
			code, body := agent.get(t, "/report")
			if code != 200 || json.Unmarshal([]byte(body), &r) != nil {
				return false
			}
			return r.Ready
		})
		var off []string
		for _, ev := range r.Events {
			if ev.Reason == "FeatureOff" && ev.Type == "Warning" {
				off = append(off, ev.Msg)
			}
		}
		named := func(s string) bool {
			for _, m := range off {
				if strings.Contains(m, s) {
					return true
				}
			}
			return false
		}
		if len(off) != 2 || !named(regYAML) || !named(notRoot) {
			t.Errorf("--write-path %s: FeatureOff events %q; want one naming %s and one naming %s\n%s", wp, off, regYAML, notRoot, tail(agent.dump(), 20))
		}
		if len(r.Failing) != 0 {
			t.Errorf("--write-path %s: sources failing: %+v", wp, r.Failing)
		}
		agent.stop(t)
	}
	if entries, err := os.ReadDir(notRoot); err != nil || len(entries) != 0 {
		t.Errorf("the agent wrote into %s, which is not containerd's content store: %v %v", notRoot, entries, err)
	}
}

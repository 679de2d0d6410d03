package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// reportJSON is GET /report as the reporter reads it.
type reportJSON struct {
	Ready   bool `json:"ready"`
	Pinned  int  `json:"pinned"`
	Sources int  `json:"sources"`
	Failing []struct {
		Source string `json:"source"`
		Error  string `json:"error"`
	} `json:"failing"`
	Events []struct {
		Seq    uint64 `json:"seq"`
		Type   string `json:"type"`
		Reason string `json:"reason"`
		Msg    string `json:"message"`
	} `json:"events"`
	Next uint64 `json:"next"`
}

// TestReportTruncatedArchive: a truncated archive beside a good one, on a
// real containerd: /report lists it as failing with a cause that does not
// repeat its path, and its retries (5 s, then 10 s) add no SourceFailed
// event to the first.
func TestReportTruncatedArchive(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeDockerSave(t, filepath.Join(imagesDir, "good.tar"), build(t, fixture.ImageSpec{Names: []string{"e2e.local/report/good:1"}}))
	staging := filepath.Join(filepath.Dir(imagesDir), "broken.tar")
	writeDockerSave(t, staging, build(t, fixture.ImageSpec{Names: []string{"e2e.local/report/broken:1"}, Layers: fixture.UniformLayers(2, 256<<10, false, 7)}))
	data, err := os.ReadFile(staging)
	if err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(imagesDir, "broken.tar")
	if err := os.WriteFile(broken, data[:len(data)*2/3], 0o644); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(broken, past, past); err != nil {
		t.Fatal(err)
	}

	agent := startAgent(t, d, dataDir, []string{imagesDir})
	read := func() reportJSON {
		code, body := agent.get(t, "/report")
		if code != 200 {
			t.Fatalf("/report: %d %s", code, body)
		}
		var r reportJSON
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("/report: %v\n%s", err, body)
		}
		return r
	}
	eventually(t, "ready with broken.tar failing", func() bool { r := read(); return r.Ready && len(r.Failing) == 1 })
	// Two retries of broken.tar: the import fails three times in all.
	eventually(t, "two retries of broken.tar", func() bool {
		return agent.metric(t, "holdfast_imports_total", map[string]string{"result": "failed"}) >= 3
	})
	r := read()
	f := r.Failing[0]
	if f.Source != broken || f.Error == "" || strings.Contains(f.Error, broken) {
		t.Errorf("failing %+v: want source %s and a cause without its path", f, broken)
	}
	var failed []string
	for _, ev := range r.Events {
		if ev.Reason == "SourceFailed" {
			failed = append(failed, ev.Msg)
			if ev.Type != "Warning" || ev.Msg != broken+": "+f.Error {
				t.Errorf("SourceFailed event %+v, want Warning %q", ev, broken+": "+f.Error)
			}
		}
	}
	if len(failed) != 1 {
		t.Errorf("%d SourceFailed events after 3 failed imports, want 1: %q", len(failed), failed)
	}
	// One image: its name and its name@digest are pinned, and a person
	// counts one.
	if r.Sources != 2 || r.Pinned != 1 {
		t.Errorf("report: %d sources, %d images pinned, want 2 and 1", r.Sources, r.Pinned)
	}
	t.Logf("condition message would read: %d images pinned; failing: broken.tar (%s)", r.Pinned, f.Error)
}

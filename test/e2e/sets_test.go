package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/report"
)

// putSets PUTs body to the agent's /sets with the Authorization header auth
// (none when empty), and returns the status code and body.
func putSets(t *testing.T, a *agentProc, auth, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, "http://"+a.addr+"/sets", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		t.Fatalf("PUT /sets: %v", err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = io.Copy(&b, resp.Body)
	return resp.StatusCode, b.String()
}

// setPhases is the phase of each image of the set name in the agent's
// report, by reference; ok is false when the report has no such set.
func setPhases(t *testing.T, a *agentProc, name string) (map[string]report.SetPhase, bool) {
	t.Helper()
	for _, s := range agentReport(t, a).Sets {
		if s.Name == name {
			out := map[string]report.SetPhase{}
			for _, img := range s.Images {
				out[img.Ref] = img.Phase
			}
			return out, true
		}
	}
	return nil, false
}

// TestSetsUnderRun: holdfast run keeps each ImageSet the reporter sends
// (PUT /sets, with its token) as a source of its own. A set that selects
// the node: the image its waves let it pull is pulled from a local
// registry, pinned and leased by the set's list, which `holdfast status`
// names as its source; the one they do not is not pulled (Waiting); one
// held unpinned in the store is pinned with the registry gone. A set that
// does not select the node pins nothing and reports only what the node
// holds. A wrong or missing token is 401, a set named ../x is 400, and
// neither changes anything. The set no longer sent is released after the
// grace period, but an image a pull list in the images dir names stays.
func TestSetsUnderRun(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	srv, host := startRegistry(t)
	mk := func(n string) *fixture.Image { return build(t, fixture.ImageSpec{Names: []string{n}}) }
	x, y, k := host+"/sets/x:1", host+"/sets/y:1", host+"/sets/kept:1"
	push(t, x, mk("e2e.local/sets/x:1"))
	push(t, y, mk("e2e.local/sets/y:1"))
	push(t, k, mk("e2e.local/sets/kept:1"))
	held, loose := mk("e2e.local/sets/held:1"), mk("e2e.local/sets/loose:1")
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(imagesDir, "keep.txt"), []byte(k+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(tempDir(t), "token")
	a := startAgent(t, d, dataDir, []string{imagesDir}, "--token-file", tokenFile, "--peer-grace", "3s", "--settle", "200ms")
	eventually(t, "the images dir's pull list pinned", func() bool { return d.isPinned(t, k) })
	keepCtrImport(t, d, loose) // a record, no pin
	sets := filepath.Join(dataDir, "peers", "sets")
	list := filepath.Join(sets, "release-7.txt")

	body := func(sets ...string) string { return `{"sets":[` + strings.Join(sets, ",") + `]}` }
	rel := `{"name":"release-7","generation":2,"selected":true,"images":["` + x + `","` + y + `","` + k + `"],"mayPull":["` + x + `"]}`
	elsewhere := `{"name":"elsewhere","generation":1,"selected":false,"images":["` + k + `","` + loose.Names[0] + `"]}`
	// Only the owner steers.
	for _, auth := range []string{"", "Bearer " + strings.Repeat("0", 64)} {
		if code, msg := putSets(t, a, auth, body(rel)); code != http.StatusUnauthorized {
			t.Errorf("PUT /sets with auth %q: %d %s, want 401", auth, code, msg)
		}
	}
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	auth := "Bearer " + strings.TrimSpace(string(token))
	bad := `{"name":"../x","selected":true,"images":["` + x + `"],"mayPull":["` + x + `"]}`
	if code, msg := putSets(t, a, auth, body(rel, bad)); code != http.StatusBadRequest || !strings.Contains(msg, `"../x"`) {
		t.Errorf("a set named ../x: %d %s, want 400 naming it", code, msg)
	}
	time.Sleep(2 * time.Second) // what a taken body would start, it starts at once
	if _, err := os.Stat(sets); !os.IsNotExist(err) {
		t.Errorf("the sets' lists dir after refused bodies: %v, want none", err)
	}
	for _, p := range []string{filepath.Join(dataDir, "peers", "x.txt"), filepath.Join(dataDir, "x.txt")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s after a set named ../x: %v", p, err)
		}
	}
	if _, ok := d.record(t, x); ok || agentReport(t, a).Sets != nil {
		t.Fatalf("a refused body changed something: x in the store %v, sets reported %+v", ok, agentReport(t, a).Sets)
	}

	// Taken: x pulled, pinned and leased by the set's list; y waits.
	a.put(t, "/sets", body(elsewhere, rel))
	eventually(t, "x pinned by the set's list", func() bool {
		l, ok := d.leaseOf(t, list)
		return d.isPinned(t, x) && ok && l.ID != ""
	})
	var st struct {
		Images []struct {
			Name    string   `json:"name"`
			Pinned  bool     `json:"pinned"`
			Sources []string `json:"sources"`
		} `json:"images"`
	}
	readStatus(t, &st, "--address", d.Address, "--data-dir", dataDir)
	named := false
	for _, img := range st.Images {
		if img.Name == x {
			named = img.Pinned && slices.Contains(img.Sources, list)
		}
	}
	if !named {
		t.Errorf("status does not show %s pinned by the set's list %s: %+v", x, list, st.Images)
	}
	eventually(t, "x held, y waiting", func() bool {
		p, _ := setPhases(t, a, "release-7")
		return p[x] == report.SetHeld && p[y] == report.SetWaiting && p[k] == report.SetHeld
	})
	if _, ok := d.record(t, y); ok {
		t.Errorf("%s, which the waves do not let the node pull, was pulled", y)
	}
	if p, ok := setPhases(t, a, "elsewhere"); !ok || len(p) != 1 || p[k] != report.SetHeld {
		t.Errorf("the set that does not select the node: %v (%v), want only %s held", p, ok, k)
	}
	if d.isPinned(t, loose.Names[0]) {
		t.Errorf("%s, of a set that does not select the node, was pinned", loose.Names[0])
	}

	// An image held unpinned in the store is pinned as it is: the registry
	// is gone.
	srv.Close()
	keepCtrImport(t, d, held)
	rel = `{"name":"release-7","generation":3,"selected":true,"images":["` + x + `","` + y + `","` + k + `","` + held.Names[0] + `"],"mayPull":["` + x + `"]}`
	a.put(t, "/sets", body(elsewhere, rel))
	eventually(t, "the held image pinned by the set's list", func() bool { return d.isPinned(t, held.Names[0]) })
	if got := readFile(t, list); !strings.Contains(got, held.Names[0]+"\n") || strings.Contains(got, y) {
		t.Errorf("the set's list:\n%s\nwant %s and not %s", got, held.Names[0], y)
	}

	// The set is no longer sent: released after the grace period, but not
	// what the images dir's pull list wants.
	left := time.Now()
	a.put(t, "/sets", body(elsewhere))
	if !d.isPinned(t, x) {
		t.Fatalf("%s unpinned at once, within the grace period", x)
	}
	eventually(t, "the set's images released", func() bool {
		_, leased := d.leaseOf(t, list)
		_, err := os.Stat(list)
		return !d.isPinned(t, x) && !d.isPinned(t, held.Names[0]) && !leased && os.IsNotExist(err)
	})
	if waited := time.Since(left); waited < 3*time.Second {
		t.Errorf("released after %s, within the grace period of 3s", waited)
	}
	if !d.isPinned(t, k) {
		t.Errorf("%s, which a pull list in the images dir names, was unpinned with the set", k)
	}
	if _, ok := setPhases(t, a, "release-7"); ok {
		t.Error("the set no longer sent is still reported")
	}
	var r report.Report
	if err := json.Unmarshal([]byte(mustGet(t, a, "/report")), &r); err != nil || len(r.Sets) != 1 {
		t.Errorf("the report's sets: %+v (%v), want elsewhere only", r.Sets, err)
	}
}

// mustGet is the body of GET path on the agent; 200 or the test fails.
func mustGet(t *testing.T, a *agentProc, path string) string {
	t.Helper()
	code, body := a.get(t, path)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	return body
}

package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// putAs PUTs body to the agent's /required with curl, run as uid:gid with no
// other group, after running prelude (a shell line that may set $AUTH, the
// Authorization header's value). It returns the HTTP status curl saw and
// what the shell printed on stderr.
func putAs(t *testing.T, a *agentProc, uid, gid int, prelude, body string) (string, string) {
	t.Helper()
	return putPathAs(t, a, "/required", uid, gid, prelude, body)
}

// putPathAs is putAs to the agent's path.
func putPathAs(t *testing.T, a *agentProc, path string, uid, gid int, prelude, body string) (string, string) {
	t.Helper()
	script := prelude + `
set -- -s -o /dev/null -w '%{http_code}' -X PUT -H 'Content-Type: application/json' --data-binary "$BODY"
if [ -n "$AUTH" ]; then set -- "$@" -H "Authorization: $AUTH"; fi
curl "$@" "$URL"`
	cmd := exec.Command("setpriv", "--reuid", itoa(uid), "--regid", itoa(gid), "--clear-groups", "sh", "-c", script)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "BODY=" + body, "URL=http://" + a.addr + path, "TOKEN_FILE=" + a.tokenFile}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("PUT %s as %d:%d: %v\n%s", path, uid, gid, err, stderr.String())
	}
	return stdout.String(), stderr.String()
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestSecRequiredOwner: only the agent's own reporter chooses what `holdfast
// run --pull-required` pulls. User nobody, on the same node and so on
// loopback, sends PUT /required naming an image a local registry serves:
// without a token, with a wrong one, and after failing to read the agent's
// token file (mode 0640, root's, in directories nobody may walk): 401 each
// time, and a few seconds later the image is not pulled, pinned, leased nor
// on the peer list, and the agent's report says no set came. Bodies that are
// not one set of full references are 400 even with the token. Then uid 65534
// in root's group, as the chart runs the reporter, reads the token and is
// taken: the image is pulled, pinned and leased as the peer source. PUT
// /sets (the ImageSets) is refused to nobody the same ways, and no set is
// listed. A token file others may read stops run (exit 2).
func TestSecRequiredOwner(t *testing.T) {
	requireRoot(t)
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		_, host := startRegistry(t)
		ref := host + "/lab/pull:v1"
		push(t, ref, build(t, fixture.ImageSpec{Names: []string{"e2e.local/sec/pull:1"}}))
		dir := tempDir(t)
		// Walkable by nobody, so that only the token file's own mode keeps it out.
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		dataDir := filepath.Join(dir, "data")
		agent := startAgent(t, d, dataDir, []string{filepath.Join(dir, "images")}, "--pull-required", "--settle", "200ms")
		for p := dataDir; p != dir; p = filepath.Dir(p) {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		before, err := json.Marshal(agentReport(t, agent).Required)
		if err != nil {
			t.Fatal(err)
		}
		body := `{"images":[{"ref":"` + ref + `","usedBy":["Deployment lab/x containers/x"]}]}`
		const nobody = 65534
		for _, tc := range []struct{ name, prelude string }{
			{"no token", ``},
			{"an empty bearer", `AUTH='Bearer '`},
			{"a wrong token", `AUTH="Bearer $(printf '%064d' 0)"`},
			{"the token file, unreadable", `AUTH="Bearer $(cat "$TOKEN_FILE")"`},
			{"the token file as a basic credential", `AUTH="Basic $(cat "$TOKEN_FILE")"`},
		} {
			code, stderr := putAs(t, agent, nobody, nobody, tc.prelude, body)
			if code != "401" {
				t.Errorf("nobody's PUT /required with %s: HTTP %s, want 401", tc.name, code)
			}
			if strings.Contains(tc.prelude, "cat") && !strings.Contains(stderr, "Permission denied") {
				t.Errorf("nobody read the token file %s: %q", agent.tokenFile, stderr)
			}
		}
		// PUT /sets, the ImageSets, has the same owner: nobody's sets are refused and nothing is listed.
		sets := `{"sets":[{"name":"lab","generation":1,"selected":true,"images":["` + ref + `"],"mayPull":["` + ref + `"]}]}`
		for _, tc := range []struct{ name, prelude string }{
			{"no token", ``},
			{"a wrong token", `AUTH="Bearer $(printf '%064d' 0)"`},
			{"the token file, unreadable", `AUTH="Bearer $(cat "$TOKEN_FILE")"`},
		} {
			if code, _ := putPathAs(t, agent, "/sets", nobody, nobody, tc.prelude, sets); code != "401" {
				t.Errorf("nobody's PUT /sets with %s: HTTP %s, want 401", tc.name, code)
			}
		}
		if _, err := os.Stat(filepath.Join(dataDir, "peers", "sets")); !os.IsNotExist(err) {
			t.Errorf("the sets' lists after nobody's PUT /sets: %v, want none", err)
		}
		if sets := agentReport(t, agent).Sets; sets != nil {
			t.Errorf("the report's sets after nobody's PUT /sets: %+v, want none", sets)
		}
		// The same from the data dir's token in another name: no.
		if code, _ := putAs(t, agent, nobody, nobody, `AUTH="Bearer $(cat "$TOKEN_FILE" 2>/dev/null || echo x)"`, `{"images":[]}`); code != "401" {
			t.Errorf("nobody's empty set: HTTP %s, want 401", code)
		}
		// Malformed bodies, with the token: 400 and nothing taken.
		for _, bad := range []string{`null`, `{"images":null}`, `{"images":[]} {"images":[{"ref":"` + ref + `"}]}`,
			`{"images":[{"ref":"sha256:` + strings.Repeat("ab", 32) + `"}]}`, `{"images":[{"ref":"UPPER/case:v1"}]}`} {
			if code, _ := putAs(t, agent, 0, 0, `AUTH="Bearer $(cat "$TOKEN_FILE")"`, bad); code != "400" {
				t.Errorf("PUT /required %s with the token: HTTP %s, want 400", bad, code)
			}
		}
		// The refused PUT above was pulled within 1.6 s when it was taken: give it more.
		time.Sleep(4 * time.Second)
		peerList := filepath.Join(dataDir, "peers", "required.txt")
		if _, ok := d.record(t, ref); ok {
			t.Errorf("%s was pulled after refused PUTs", ref)
		}
		if l, ok := d.leaseOf(t, peerList); ok {
			t.Errorf("the peer source %s is leased after refused PUTs: %s", peerList, l.ID)
		}
		if data, err := os.ReadFile(peerList); err == nil && strings.Contains(string(data), ref) {
			t.Errorf("the peer list names %s after refused PUTs:\n%s", ref, data)
		}
		if after, _ := json.Marshal(agentReport(t, agent).Required); !bytes.Equal(after, before) {
			t.Errorf("the report's required set went from %s to %s after refused PUTs", before, after)
		}
		fi, err := os.Stat(agent.tokenFile)
		if err != nil {
			t.Fatalf("the agent made no token file: %v\nagent:\n%s", err, tail(agent.dump(), 30))
		}
		if st := fi.Sys().(*syscall.Stat_t); fi.Mode() != 0o640 || st.Uid != 0 || st.Gid != 0 {
			t.Errorf("token file %s: mode %v, owner %d:%d; want 0640 root:root", agent.tokenFile, fi.Mode(), st.Uid, st.Gid)
		}
		if t.Failed() {
			t.Fatalf("agent:\n%s", tail(agent.dump(), 30))
		}

		// The reporter: uid 65534 in root's group, as in the chart, reads the token.
		if code, stderr := putAs(t, agent, nobody, 0, `AUTH="Bearer $(cat "$TOKEN_FILE")"`, body); code != "204" {
			t.Fatalf("the reporter's PUT /required: HTTP %s, want 204\n%s", code, stderr)
		}
		eventually(t, ref+" pulled, pinned and leased as the peer source", func() bool {
			cri, hf := d.pinnedBy(t, ref)
			_, leased := d.leaseOf(t, peerList)
			return (cri || d.Old) && hf && leased
		})

		// A token file others may read: run does not start (exit 2), and says why.
		loose := filepath.Join(dir, "loose-token")
		if err := os.WriteFile(loose, []byte(strings.Repeat("ab", 32)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(loose, 0o644); err != nil {
			t.Fatal(err)
		}
		res := holdfast(t, "run", "--address", d.Address, "--data-dir", filepath.Join(dir, "data2"), "--listen", "127.0.0.1:0", "--token-file", loose)
		if want := "token file " + loose + " is readable by others (mode 0644)"; res.Code != 2 || !strings.Contains(res.Stderr, want) {
			t.Errorf("run with a token file others may read: exit %d, want 2 and %q\n%s", res.Code, want, res.Stderr)
		}
	})
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// goodPair writes two good archives into dir (a docker save and a gzip OCI
// tar) and returns their image names.
func goodPair(t *testing.T, dir string) []string {
	t.Helper()
	none := fixture.CompressOptions{}
	one := build(t, fixture.ImageSpec{Names: []string{"e2e.local/good/one:1"}})
	two := build(t, fixture.ImageSpec{Names: []string{"e2e.local/good/two:1"}})
	writeArchive(t, filepath.Join(dir, "good-one.tar"), fixture.None, none,
		func(ctx context.Context, w io.Writer) error { return fixture.WriteDockerSave(ctx, w, one) })
	writeArchive(t, filepath.Join(dir, "good-two.tar.gz"), fixture.Gzip, none,
		func(ctx context.Context, w io.Writer) error {
			return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerd}, two)
		})
	return []string{"e2e.local/good/one:1", "e2e.local/good/two:1"}
}

// errorLines returns the "error: " lines of a sync's stderr.
func errorLines(stderr string) []string {
	var out []string
	for _, line := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(line, "error: ") {
			out = append(out, line)
		}
	}
	return out
}

// TestMalformed puts each malformed kind, one per `holdfast sync` pass, beside
// two good archives: the pass exits 1 with exactly one error, naming the file
// and the kind's cause; the bad file leaves no record, no lease and no ingest;
// the good archives stay imported and pinned; the sync's peak RSS stays
// under 150 MiB (a million entries included). A kind that is not named as an
// archive and is not one is skipped: exit 0, no error. Each kind logs its outcome ("outcome:"),
// which `go run ./test/reltable` turns into docs/reliability.md's table.
// Every kind runs on both write paths; after each pass the store's directory
// holds no temp file and no blob file the store did not commit or whose
// bytes do not match its name, and on the direct path the good archives had
// their blobs written directly.
func TestMalformed(t *testing.T) {
	requireRoot(t)
	kinds := malformedKinds(t)
	forEachDaemonAndPath(t, func(t *testing.T, d *daemon, wp string) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		goods := goodPair(t, imagesDir)
		before := d.recordNames(t)
		placed := map[string]int{}
		uncommitted := map[string]bool{} // blob files reported left: not again by the next kinds
		for _, k := range kinds {
			t.Run(k.name, func(t *testing.T) {
				path := filepath.Join(imagesDir, k.file())
				if err := os.WriteFile(path, k.data, 0o644); err != nil {
					t.Fatal(err)
				}
				defer os.Remove(path)
				res, rss, took := measured(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--log-level", "debug", wpFlag(wp))
				for p, n := range directPlaced(t, res.Stderr) {
					placed[p] += n
				}
				errs := errorLines(res.Stderr)
				if rss >= rssLimit {
					t.Errorf("peak RSS of the sync %d MiB, want under %d MiB", rss>>20, rssLimit>>20)
				}
				switch {
				case k.skip:
					if res.Code != 0 || len(errs) != 0 {
						t.Errorf("sync exited %d with errors %q; want 0 and none (the file is skipped)", res.Code, errs)
					}
					if !loggedSkip(res.Stderr, path) {
						t.Errorf("no debug record says %s was skipped:\n%s", path, tail(res.Stderr, 20))
					}
					t.Logf("outcome: skipped (not an archive) exit=%d took=%s peak_rss=%d", res.Code, took.Round(time.Millisecond), rss>>20)
				default:
					cause := k.cause
					if wp == "direct" && k.directCause != "" {
						cause = k.directCause
					}
					if res.Code != 1 {
						t.Errorf("sync exited %d, want 1", res.Code)
					}
					if len(errs) != 1 {
						t.Fatalf("%d error lines, want 1: %q\n%s", len(errs), errs, tail(res.Stderr, 20))
					}
					if !strings.Contains(errs[0], k.file()) || !strings.Contains(errs[0], cause) {
						t.Errorf("error %q: want the file name %q and the cause %q", errs[0], k.file(), cause)
					}
					msg := strings.TrimPrefix(errs[0], "error: import "+path+": ")
					t.Logf("outcome: error exit=%d took=%s peak_rss=%d cause=%q message=%q", res.Code, took.Round(time.Millisecond), rss>>20, cause, msg)
				}
				if k.image != "" {
					if _, ok := d.record(t, k.image); ok {
						t.Errorf("record %s was made", k.image)
					}
				}
				if _, ok := d.leaseOf(t, path); ok {
					t.Errorf("a lease was left for %s", path)
				}
				if refs := d.ingests(t); len(refs) != 0 {
					t.Errorf("ingests left: %v", refs)
				}
				for _, n := range d.recordNames(t) {
					if !contains(before, n) && !strings.HasPrefix(n, "sha256:") && !strings.HasPrefix(n, "e2e.local/good/") {
						t.Errorf("unexpected record %s", n)
					}
				}
				for _, n := range goods {
					rec, ok := d.record(t, n)
					if !ok || rec.Labels["io.holdfast.pinned"] != "pinned" || rec.Labels["io.cri-containerd.pinned"] != "pinned" {
						t.Errorf("good image %s not pinned: %v %v", n, ok, rec.Labels)
					}
				}
				if n := len(d.holdfastLeases(t)); n != 2 {
					t.Errorf("%d holdfast leases, want 2 (the good archives')", n)
				}
				wpRequireStoreClean(t, d, uncommitted)
			})
		}
		wpRequirePlacedCounts(t, wp, placed, filepath.Join(imagesDir, "good-one.tar"), filepath.Join(imagesDir, "good-two.tar.gz"))
		t.Logf("kinds: %d on %s, %s", len(kinds), d.Name, wpFlag(wp))
	})
}

// loggedSkip reports whether a JSON log record says path was skipped.
func loggedSkip(stderr, path string) bool {
	for _, line := range strings.Split(stderr, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "skipped" && m["path"] == path {
			return true
		}
	}
	return false
}

// TestMalformedAgent drops every kind at once into the images dir of a
// running `holdfast run`: it reports an error for each archive kind, keeps
// running, keeps the good images pinned, leaves no lease or ingest for the
// bad files, and stops cleanly on SIGTERM. On both write paths; on the
// direct one the good archives' blobs were written directly, and the store's
// directory keeps no temp file and no blob file it did not commit.
func TestMalformedAgent(t *testing.T) {
	requireRoot(t)
	kinds := malformedKinds(t)
	forEachDaemonAndPath(t, func(t *testing.T, d *daemon, wp string) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		goods := goodPair(t, imagesDir)
		agent := startAgent(t, d, dataDir, []string{imagesDir}, wpFlag(wp))
		d.waitPinned(t, goods...)
		// Write each kind under a dot name, then rename it in: the agent
		// never sees a half-written file.
		for _, k := range kinds {
			tmp := filepath.Join(imagesDir, "."+k.file())
			if err := os.WriteFile(tmp, k.data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(imagesDir, k.file())); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(3 * time.Minute)
		for _, k := range kinds {
			if k.skip {
				continue
			}
			path := filepath.Join(imagesDir, k.file())
			cause := k.cause
			if wp == "direct" && k.directCause != "" {
				cause = k.directCause
			}
			for !agentReported(agent, path, cause) {
				if time.Now().After(deadline) {
					t.Fatalf("no error reported for %s (cause %q)\n%s", k.file(), cause, tail(agent.dump(), 40))
				}
				select {
				case err := <-agent.exited:
					t.Fatalf("holdfast run exited (%v) during the pass\n%s", err, tail(agent.dump(), 40))
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
		if agent.cmd.ProcessState != nil {
			t.Fatal("holdfast run has exited")
		}
		if code, _ := agent.get(t, "/healthz"); code != 200 {
			t.Errorf("/healthz %d after the pass, want 200", code)
		}
		d.waitPinned(t, goods...)
		// Failed sources are retried with backoff: an attempt in flight
		// holds a lease until it fails. Stop the agent, then look: nothing
		// of the bad files may be left.
		_ = agent.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-agent.exited:
			if err != nil {
				t.Errorf("holdfast run exited with %v after SIGTERM, want 0", err)
			}
			agent.exited <- err // for the cleanup's stop
		case <-time.After(30 * time.Second):
			t.Errorf("holdfast run did not stop within 30s of SIGTERM")
		}
		for _, k := range kinds {
			if l, ok := d.leaseOf(t, filepath.Join(imagesDir, k.file())); ok {
				t.Errorf("%s: lease %s was left", k.file(), l.ID)
			}
			if k.image != "" {
				if _, ok := d.record(t, k.image); ok {
					t.Errorf("%s: record %s was made", k.file(), k.image)
				}
			}
		}
		if refs := d.ingests(t); len(refs) != 0 {
			t.Errorf("ingests left: %v", refs)
		}
		for _, n := range goods {
			if cri, hf := d.pinnedBy(t, n); !cri || !hf {
				t.Errorf("good image %s not pinned after the agent stopped: CRI label %v, holdfast label %v", n, cri, hf)
			}
		}
		wpRequirePlaced(t, wp, agent.dump(), filepath.Join(imagesDir, "good-one.tar"), filepath.Join(imagesDir, "good-two.tar.gz"))
		wpRequireStoreClean(t, d, nil)
		t.Logf("kinds dropped at once: %d on %s, %s", len(kinds), d.Name, wpFlag(wp))
	})
}

// agentReported reports whether the agent logged an error record naming path
// and containing cause.
func agentReported(a *agentProc, path, cause string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range a.logs {
		if fmt.Sprint(m["level"]) != "ERROR" && fmt.Sprint(m["level"]) != "WARN" {
			continue
		}
		line, _ := json.Marshal(m)
		if strings.Contains(string(line), path) && strings.Contains(string(line), jsonEscape(cause)) {
			return true
		}
	}
	return false
}

func jsonEscape(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

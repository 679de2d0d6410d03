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
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// Bad input: every file holdfast must refuse or skip is a row of one table
// (badInput, in badinput_cases_test.go), and every test here drops rows of
// it into an images dir and asserts the same outcome: one error naming the
// file and the cause, nothing left of it (no record, lease or ingest), the
// good archives beside it imported and pinned, the process's memory bounded.
//
//   - TestBadInputs: broken archives of real images, all at once, one sync.
//   - TestMalformed: each malformed kind alone, one sync each (the
//     reliability table of docs/reliability.md, see test/reltable).
//   - TestMalformedAgent: every malformed kind at once under `holdfast run`.
//   - TestHostileDecompression: decompression bombs and huge decoder windows.

// rssLimit is what the whole `holdfast sync` process may reach on a hostile file.
const rssLimit = 150 << 20

// TestBadInputs puts broken archives beside good ones: the good ones import and
// pin, each bad one gives one error naming its file and the cause, and leaves no
// record, no lease and no ingest behind. On both write paths; on the direct
// one the good archives' blobs were written directly, and the store's
// directory keeps no temp file and no blob file it did not commit.
func TestBadInputs(t *testing.T) {
	forEachDaemonAndPath(t, func(t *testing.T, d *daemon, wp string) {
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		goods := goodPair(t, imagesDir)
		bads := badArchives(t)
		for _, b := range bads {
			b.put(t, imagesDir)
		}
		before := d.recordNames(t)
		res := d.wpSync(t, wp, filepath.Join(dir, "data"), imagesDir)
		if res.Code != 1 {
			t.Fatalf("sync exited %d, want 1\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
		}
		wpRequirePlaced(t, wp, res.Stderr, filepath.Join(imagesDir, "good-one.tar"), filepath.Join(imagesDir, "good-two.tar.gz"))
		if want := fmt.Sprintf("%d failed", len(bads)); !strings.Contains(res.Stdout, "2 imported") || !strings.Contains(res.Stdout, want) {
			t.Errorf("summary %q, want 2 imported and %s", res.Stdout, want)
		}
		errLines := map[string][]string{}
		for _, line := range errorLines(res.Stderr) {
			for _, b := range bads {
				if strings.Contains(line, filepath.Join(imagesDir, b.file)+":") {
					errLines[b.file] = append(errLines[b.file], line)
				}
			}
		}
		for _, b := range bads {
			if lines := errLines[b.file]; len(lines) != 1 {
				t.Errorf("%s: %d error lines, want 1: %q", b.file, len(lines), lines)
			} else if !strings.Contains(lines[0], b.cause) {
				t.Errorf("%s: error %q does not give the cause (%q)", b.file, lines[0], b.cause)
			}
		}
		requireOnlyGoodsLeft(t, d, before, goods, imagesDir, bads)
		wpRequireStoreClean(t, d, nil)
	})
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
				path := k.put(t, imagesDir)
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
					cause := k.causeOn(wp)
					if res.Code != 1 {
						t.Errorf("sync exited %d, want 1", res.Code)
					}
					if len(errs) != 1 {
						t.Fatalf("%d error lines, want 1: %q\n%s", len(errs), errs, tail(res.Stderr, 20))
					}
					if !strings.Contains(errs[0], k.file) || !strings.Contains(errs[0], cause) {
						t.Errorf("error %q: want the file name %q and the cause %q", errs[0], k.file, cause)
					}
					msg := strings.TrimPrefix(errs[0], "error: import "+path+": ")
					t.Logf("outcome: error exit=%d took=%s peak_rss=%d cause=%q message=%q", res.Code, took.Round(time.Millisecond), rss>>20, cause, msg)
				}
				requireOnlyGoodsLeft(t, d, before, goods, imagesDir, []badInput{k})
				wpRequireStoreClean(t, d, uncommitted)
			})
		}
		wpRequirePlacedCounts(t, wp, placed, filepath.Join(imagesDir, "good-one.tar"), filepath.Join(imagesDir, "good-two.tar.gz"))
		t.Logf("kinds: %d on %s, %s", len(kinds), d.Name, wpFlag(wp))
	})
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
			tmp := filepath.Join(imagesDir, "."+k.file)
			k.writeTo(t, tmp)
			if err := os.Rename(tmp, filepath.Join(imagesDir, k.file)); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(3 * time.Minute)
		for _, k := range kinds {
			if k.skip {
				continue
			}
			path, cause := filepath.Join(imagesDir, k.file), k.causeOn(wp)
			for !agentReported(agent, path, cause) {
				if time.Now().After(deadline) {
					t.Fatalf("no error reported for %s (cause %q)\n%s", k.file, cause, tail(agent.dump(), 40))
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
		requireNothingLeft(t, d, imagesDir, kinds)
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

// TestHostileDecompression gives `holdfast sync` small files that decompress
// to a lot, or declare decoder windows and dictionaries of gigabytes: each
// ends with one clear error naming the file, and the process's peak RSS stays
// under 150 MiB. A legitimately large archive — a zstd frame with a 128 MiB
// window and more than 128 MiB of data — still imports.
func TestHostileDecompression(t *testing.T) {
	d, _, _ := embeddedScene(t)
	root := tempDir(t)
	var fs syscall.Statfs_t
	if err := syscall.Statfs(root, &fs); err != nil {
		t.Fatal(err)
	}
	free := int64(fs.Bavail) * fs.Bsize
	for _, c := range hostileInputs(t, free) {
		t.Run(c.name, func(t *testing.T) {
			if c.extra != nil && free < 6<<30 {
				testenv.Missing(t, "disk", fmt.Sprintf("%s needs 6 GiB free on %s (--min-free is set 4 GiB below it); %d MiB are", c.name, root, free>>20))
			}
			dir := filepath.Join(root, c.name)
			path := c.put(t, filepath.Join(dir, "images"))
			st, _ := os.Stat(path)
			res, rss, took := syncRSS(t, d, filepath.Join(dir, "images"), filepath.Join(dir, "data"), c.extra...)
			errs := errorLines(res.Stderr)
			t.Logf("outcome: file=%d KiB exit=%d peak_rss=%d MiB took=%s message=%q", st.Size()>>10, res.Code, rss>>20, took.Round(time.Millisecond), strings.Join(errs, " | "))
			if res.Code != 1 || len(errs) != 1 || !strings.Contains(errs[0], c.file) || !strings.Contains(errs[0], c.cause) {
				t.Errorf("sync exited %d with errors %q; want 1 and one error naming %s with %q\n%s", res.Code, errs, c.file, c.cause, tail(res.Stderr, 10))
			}
			if rss >= rssLimit {
				t.Errorf("peak RSS %d MiB, want under %d MiB", rss>>20, rssLimit>>20)
			}
			requireNothingLeft(t, d, filepath.Dir(path), []badInput{c})
		})
	}

	// Legitimately large: one layer of 144 MiB, the archive zstd-compressed
	// with a 128 MiB window.
	t.Run("zstd-128mib-window-144mib-layer", func(t *testing.T) {
		big := build(t, fixture.ImageSpec{Names: []string{"e2e.local/hostile/large:1"}, Layers: []fixture.LayerSpec{{Size: 144 << 20, Compressible: true, Seed: 11}}})
		dir := filepath.Join(root, "large")
		path := filepath.Join(dir, "images", "large.tar.zst")
		writeArchive(t, path, fixture.Zstd, fixture.CompressOptions{ZstdWindow: 128 << 20},
			func(ctx context.Context, w io.Writer) error {
				return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerd}, big)
			})
		if w := zstdWindow(t, path); w != 128<<20 {
			t.Fatalf("the archive declares a %d-byte window, want 128 MiB", w)
		}
		st, _ := os.Stat(path)
		res, rss, took := syncRSS(t, d, filepath.Join(dir, "images"), filepath.Join(dir, "data"))
		t.Logf("outcome: file=%d KiB exit=%d peak_rss=%d MiB took=%s message=%q", st.Size()>>10, res.Code, rss>>20, took.Round(time.Millisecond), strings.Join(errorLines(res.Stderr), " | "))
		if res.Code != 0 {
			t.Fatalf("sync exited %d\n%s", res.Code, tail(res.Stderr, 10))
		}
		if rec, ok := d.record(t, "e2e.local/hostile/large:1"); !ok || rec.Labels["io.holdfast.pinned"] != "pinned" {
			t.Errorf("e2e.local/hostile/large:1 not imported and pinned: %v %v", ok, rec.Labels)
		}
	})
}

// requireNothingLeft checks that the bad inputs in dir left nothing: no
// lease for their files, none of the records their images are named, and no
// ingest in the store.
func requireNothingLeft(t *testing.T, d *daemon, dir string, bads []badInput) {
	t.Helper()
	for _, b := range bads {
		if l, ok := d.leaseOf(t, filepath.Join(dir, b.file)); ok {
			t.Errorf("%s: lease %s was left", b.file, l.ID)
		}
		for _, n := range b.images {
			if _, ok := d.record(t, n); ok {
				t.Errorf("%s: record %s was made", b.file, n)
			}
		}
	}
	if refs := d.ingests(t); len(refs) != 0 {
		t.Errorf("ingests left: %v", refs)
	}
}

// requireOnlyGoodsLeft checks requireNothingLeft, and that the store holds
// nothing new but the good images' records (with their name@digest records
// and the CRI's), those pinned, and the good archives' two leases.
func requireOnlyGoodsLeft(t *testing.T, d *daemon, before, goods []string, dir string, bads []badInput) {
	t.Helper()
	requireNothingLeft(t, d, dir, bads)
	for _, n := range d.recordNames(t) {
		if !slices.Contains(before, n) && !strings.HasPrefix(n, "sha256:") && !strings.HasPrefix(n, "e2e.local/good/") {
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
}

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

// syncRSS runs `holdfast sync` on one images dir and returns its result and
// its peak RSS; see measured.
func syncRSS(t *testing.T, d *daemon, imagesDir, dataDir string, extra ...string) (result, int64, time.Duration) {
	t.Helper()
	return measured(t, append([]string{"sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir}, extra...)...)
}

// measured runs holdfast with args and returns its result, its peak RSS
// (rusage ru_maxrss of the holdfast process, read by the test binary re-run
// as a small wrapper: see maxRSSEnv) and how long it ran.
func measured(t *testing.T, args ...string) (result, int64, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "maxrss")
	cmd := exec.CommandContext(ctx, self, append([]string{holdfastBin}, args...)...)
	cmd.Env = append(os.Environ(), maxRSSEnv+"="+out)
	start := time.Now()
	res := runHoldfast(t, cmd)
	took := time.Since(start)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("reading the peak RSS: %v\n%s", err, res.Stderr)
	}
	kib, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return res, kib << 10, took
}

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/embedded"
	"github.com/holdfast-project/holdfast/internal/fixture"
)

// crashStore is an embedded containerd the test can kill and start again on
// the same root; its daemon's client reconnects by itself.
type crashStore struct {
	t   *testing.T
	dir string
	p   *embedded.Process
	d   *daemon
}

func crashStartStore(t *testing.T, dir string) *crashStore {
	t.Helper()
	s := &crashStore{t: t, dir: dir}
	s.start()
	s.d = connect(t, "embedded", s.p.Address(), false)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if s.p != nil {
			if err := s.p.Stop(ctx); err != nil {
				t.Errorf("stopping containerd: %v", err)
			}
		}
	})
	return s
}

func (s *crashStore) start() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := embedded.Start(ctx, s.dir, embedded.Options{Binary: holdfastBin})
	if err != nil {
		s.t.Fatalf("starting containerd: %v", err)
	}
	s.p = p
	if s.d != nil {
		eventually(s.t, "the client to reconnect", func() bool {
			_, err := s.d.Client.Version(context.Background())
			return err == nil
		})
	}
}

// kill kills containerd with SIGKILL and waits for it to be gone.
func (s *crashStore) kill() {
	s.t.Helper()
	if err := syscall.Kill(s.p.PID(), syscall.SIGKILL); err != nil {
		s.t.Fatal(err)
	}
	select {
	case <-s.p.Done():
	case <-time.After(30 * time.Second):
		s.t.Fatal("containerd still runs 30s after SIGKILL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = s.p.Stop(ctx) // it is gone: this only reaps and cleans up
	s.p = nil
}

// crashSlot is one archive of the trials' images dir: absent, or one of two
// versions of it, under one of two file names.
type crashSlot struct {
	base     string
	versions [2]*fixture.Image
	version  int    // -1: absent
	path     string // where it is, if present
}

// crashSlots builds the trials' archives: tags moved by a new version (a),
// names dropped (b), and layers shared across sources (c, d).
// crashScene starts a store in a temp dir, with an empty images dir and a
// data dir beside it, and the archive slots, none placed yet (version -1).
func crashScene(t *testing.T) (s *crashStore, imagesDir, dataDir string, slots []*crashSlot) {
	dir := tempDir(t)
	s = crashStartStore(t, filepath.Join(dir, "c"))
	imagesDir, dataDir = filepath.Join(dir, "images"), filepath.Join(dir, "data")
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	slots = crashSlots(t)
	for _, sl := range slots {
		sl.version = -1
	}
	return s, imagesDir, dataDir, slots
}

func crashSlots(t *testing.T) []*crashSlot {
	t.Helper()
	shared, err := fixture.NewLayer(context.Background(), fixture.LayerSpec{Size: 1 << 20, Seed: 4242}, fixture.None)
	if err != nil {
		t.Fatal(err)
	}
	img := func(seed int64, withShared bool, names ...string) *fixture.Image {
		spec := fixture.ImageSpec{Names: names, Layers: fixture.UniformLayers(3, 1<<20, false, seed)}
		if withShared {
			spec.SharedLayers = []*fixture.Layer{shared}
		}
		return build(t, spec)
	}
	return []*crashSlot{
		{base: "a", versions: [2]*fixture.Image{img(11, false, "e2e.local/crash/a:1"), img(12, false, "e2e.local/crash/a:1")}},
		{base: "b", versions: [2]*fixture.Image{img(21, false, "e2e.local/crash/b:1", "e2e.local/crash/b:latest"), img(22, false, "e2e.local/crash/b:2")}},
		{base: "c", versions: [2]*fixture.Image{img(31, true, "e2e.local/crash/c:1"), img(32, true, "e2e.local/crash/c:1")}},
		{base: "d", versions: [2]*fixture.Image{img(41, true, "e2e.local/crash/d:1"), img(42, true, "e2e.local/crash/d:2")}},
	}
}

// crashChurn changes the images dir at random: each slot is removed, added,
// replaced by its other version or renamed; at least one changes. It says
// what it did.
func crashChurn(t *testing.T, rng *rand.Rand, dir string, slots []*crashSlot) string {
	t.Helper()
	var did []string
	for len(did) == 0 {
		for _, s := range slots {
			version, name := rng.IntN(3)-1, s.base+".tar"
			if version >= 0 && rng.IntN(2) == 1 {
				name = s.base + "-moved.tar"
			}
			path := filepath.Join(dir, name)
			if version < 0 {
				path = ""
			}
			if version == s.version && path == s.path {
				continue
			}
			switch {
			case version < 0:
				did = append(did, "rm "+filepath.Base(s.path))
			case s.version < 0:
				did = append(did, fmt.Sprintf("add %s v%d", name, version+1))
			case s.path != path && s.version == version:
				did = append(did, "mv "+filepath.Base(s.path)+" "+name)
			default:
				did = append(did, fmt.Sprintf("replace %s v%d by %s v%d", filepath.Base(s.path), s.version+1, name, version+1))
			}
			crashPlace(t, s, version, path)
		}
	}
	return strings.Join(did, ", ")
}

// crashPlace puts version of slot s at path ("" and -1: nowhere): a rename
// when only the name changes, else the old file removed and the new one
// written whole.
func crashPlace(t *testing.T, s *crashSlot, version int, path string) {
	t.Helper()
	switch {
	case s.version >= 0 && version == s.version && path != "":
		if err := os.Rename(s.path, path); err != nil {
			t.Fatal(err)
		}
	default:
		if s.version >= 0 {
			if err := os.Remove(s.path); err != nil {
				t.Fatal(err)
			}
		}
		if version >= 0 {
			writeDockerSave(t, path, s.versions[version])
		}
	}
	s.version, s.path = version, path
}

// crashSources is what the images dir holds, for invCheck.
func crashSources(slots []*crashSlot) map[string][]*fixture.Image {
	out := map[string][]*fixture.Image{}
	for _, s := range slots {
		if s.version >= 0 {
			out[s.path] = []*fixture.Image{s.versions[s.version]}
		}
	}
	return out
}

// crashEnvInt reads a positive integer from the environment, or def.
func crashEnvInt(t *testing.T, name string, def int64) int64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a number", name, v)
	}
	return n
}

// crashSync starts `holdfast sync` and kills it (or, with killStore,
// containerd) with SIGKILL after delay, unless it finished before. It says
// whether the kill came first, and if not, how long the sync took.
func crashSync(t *testing.T, s *crashStore, dataDir, imagesDir, writePath string, delay time.Duration, killStore bool) (killed bool, took time.Duration, res string) {
	t.Helper()
	cmd := exec.Command(holdfastBin, "sync", "--address", s.d.Address, "--data-dir", dataDir, "--images", imagesDir, "--write-path", writePath)
	cmd.Env = append(os.Environ(), "HOLDFAST_LOG_FORMAT=json")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return false, time.Since(start), fmt.Sprintf("finished first (%v)", err)
	case <-time.After(delay):
	}
	if killStore {
		s.kill()
		select {
		case err := <-done:
			return true, 0, fmt.Sprintf("sync after containerd's death: %v", err)
		case <-time.After(3 * time.Minute):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("holdfast sync still ran 3 min after containerd was killed under it:\n%s", tail(out.String(), 20))
			return true, 0, "hung"
		}
	}
	_ = cmd.Process.Kill()
	err := <-done
	return true, 0, fmt.Sprintf("%v", err)
}

// TestCrashTrials kills holdfast sync, holdfast run and containerd at random
// points with SIGKILL while sources come, go, change and move, writing blobs
// through containerd or directly into its directory, then recovers (a sync,
// or the agent restarted until a pass after ready) and checks the invariants
// (invCheck, and no temp file of a direct write left). HOLDFAST_CRASH_TRIALS sets the number of trials
// (default 4), HOLDFAST_CRASH_SEED the seed (default: the clock; logged).
func TestCrashTrials(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	trials := crashEnvInt(t, "HOLDFAST_CRASH_TRIALS", 4)
	seed := crashEnvInt(t, "HOLDFAST_CRASH_SEED", time.Now().UnixNano()&0x7fffffff)
	t.Logf("seed %d (HOLDFAST_CRASH_SEED=%d repeats this run), %d trials", seed, seed, trials)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))

	s, imagesDir, dataDir, slots := crashScene(t)

	// The span of the random points: one sync of every archive, measured.
	for _, sl := range slots {
		crashPlace(t, sl, 0, filepath.Join(imagesDir, sl.base+".tar"))
	}
	start := time.Now()
	if res := s.d.sync(t, dataDir, imagesDir); res.Code != 0 {
		t.Fatalf("first sync exited %d\n%s", res.Code, tail(res.Stderr, 20))
	}
	span := time.Since(start)
	t.Logf("a sync of %d archives takes %v: the first kills fall in [0, %v]", len(slots), span, span)
	if bad := invCheck(t, s.d, dataDir, []string{imagesDir}, crashSources(slots)); len(bad) > 0 {
		t.Fatalf("invariants after the first sync:\n%s", strings.Join(bad, "\n"))
	}

	kinds := []string{"sync", "run", "containerd"}
	counts := map[string]int{}
	// The span of each kind's kills: a sync that finished before its kill
	// gives the next one of its kind its own duration.
	spans := map[string]time.Duration{"sync": span, "run": span, "containerd": span}
	violations := 0
	for i := range int(trials) {
		kind := kinds[i%len(kinds)]
		churn := crashChurn(t, rng, imagesDir, slots)
		delay := time.Duration(rng.Int64N(int64(spans[kind]) + 1))
		// Blobs streamed through containerd's API, or written into its
		// directory and linked into place (--write-path direct).
		writePath := []string{"stream", "direct"}[rng.IntN(2)]
		var killed bool
		var took time.Duration
		var what string
		switch kind {
		case "sync":
			killed, took, what = crashSync(t, s, dataDir, imagesDir, writePath, delay, false)
		case "containerd":
			killed, took, what = crashSync(t, s, dataDir, imagesDir, writePath, delay, true)
			if s.p == nil {
				s.start()
			}
		case "run":
			a := startAgent(t, s.d, dataDir, []string{imagesDir}, "--write-path", writePath)
			select {
			case <-a.exited:
				t.Fatalf("holdfast run exited by itself:\n%s", tail(a.dump(), 20))
			case <-time.After(delay):
			}
			_ = a.cmd.Process.Kill()
			<-a.exited
			killed, what = true, "killed"
		}
		if killed {
			counts[kind]++
		} else {
			spans[kind] = took
		}
		// Recover: sync trials with a sync, agent trials with the agent.
		recovered := time.Now()
		if kind == "run" {
			a := startAgent(t, s.d, dataDir, []string{imagesDir}, "--write-path", writePath)
			eventually(t, "/readyz to turn 200 after the restart", func() bool { code, _ := a.get(t, "/readyz"); return code == 200 })
			gapScanned(t, a, imagesDir)
			a.stop(t)
			crashRemoveMarks(t, imagesDir)
		} else if res := holdfast(t, "sync", "--address", s.d.Address, "--data-dir", dataDir, "--images", imagesDir, "--write-path", writePath); res.Code != 0 {
			t.Errorf("trial %d (%s): the sync after the kill exited %d\n%s", i, kind, res.Code, tail(res.Stderr, 20))
			violations++
		}
		bad := invCheck(t, s.d, dataDir, []string{imagesDir}, crashSources(slots))
		// The recovery's pass deleted the probe leases whose life was over.
		bad = append(bad, probesSwept(t, s.d, recovered)...)
		if writePath == "direct" {
			bad = append(bad, crashTempLeft(t, s.d)...)
		}
		t.Logf("trial %d: %s; kill %s (%s) at %v (%s): %d violations", i, churn, kind, writePath, delay.Round(time.Millisecond), what, len(bad))
		if len(bad) > 0 {
			violations += len(bad)
			t.Errorf("trial %d (%s killed at %v after %s): invariants broken:\n%s", i, kind, delay, churn, strings.Join(bad, "\n"))
		}
	}
	t.Logf("%d trials (seed %d): kills before the end: %v; %d violations", trials, seed, counts, violations)
}

// crashTempLeft lists the files a direct write left in the content store's
// holdfast-tmp directory: after a pass that wrote directly, none may stay.
func crashTempLeft(t *testing.T, d *daemon) []string {
	t.Helper()
	dir := filepath.Join(directContentRoot(t, d), "holdfast-tmp")
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var bad []string
	for _, e := range entries {
		bad = append(bad, "temp file left by a direct write: "+filepath.Join(dir, e.Name()))
	}
	return bad
}

// crashRemoveMarks removes the marks gapScanned left in dir.
func crashRemoveMarks(t *testing.T, dir string) {
	t.Helper()
	marks, _ := filepath.Glob(filepath.Join(dir, "scan-mark-*"))
	for _, m := range marks {
		if err := os.Remove(m); err != nil {
			t.Fatal(err)
		}
	}
}

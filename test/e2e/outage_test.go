package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/platforms"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// TestContainerdOutage: containerd stopped under `holdfast run` for a while
// (10 s; a minute with HOLDFAST_SOAK set), with an image's records deleted
// and another image's layer file removed by hand from the content store
// meanwhile. The agent stays up; /healthz says containerd does not answer
// and /readyz is not ready while it is down; once containerd is back, a
// pass heals the records, notices the lost layer and imports it again from
// its archive, and every invariant holds.
func TestContainerdOutage(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	outage := 10 * time.Second
	if os.Getenv("HOLDFAST_SOAK") != "" {
		outage = time.Minute
	}
	dir := tempDir(t)
	s := crashStartStore(t, filepath.Join(dir, "c"))
	imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
	a := build(t, fixture.ImageSpec{Names: []string{"e2e.local/outage/a:1"}})
	b := build(t, fixture.ImageSpec{Names: []string{"e2e.local/outage/b:1"}})
	sources := map[string][]*fixture.Image{
		filepath.Join(imagesDir, "a.tar"): {a},
		filepath.Join(imagesDir, "b.tar"): {b},
	}
	for path, imgs := range sources {
		writeDockerSave(t, path, imgs...)
	}
	agent := startAgent(t, s.d, dataDir, []string{imagesDir})
	s.d.waitPinned(t, "e2e.local/outage/a:1", "e2e.local/outage/b:1")
	eventually(t, "/readyz to turn 200", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })

	// With the agent frozen: a's records deleted through another client,
	// then containerd stopped, then a layer file of b removed by hand.
	recA, _ := s.d.record(t, "e2e.local/outage/a:1")
	recB, _ := s.d.record(t, "e2e.local/outage/b:1")
	blobs := s.d.hostBlobs(t, recB.Target)
	layer := blobs[len(blobs)-1]
	if !strings.Contains(layer.MediaType, "layer") {
		t.Fatalf("the last host blob of b is %s, not a layer", layer.MediaType)
	}
	root := directContentRoot(t, s.d)
	gapFreeze(t, agent)
	s.d.deleteImageSync(t, recA.Target.Digest)
	if _, ok := s.d.record(t, "e2e.local/outage/a:1"); ok {
		t.Fatal("a's record is still there after its delete")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	if err := s.p.Stop(ctx); err != nil {
		t.Fatalf("stopping containerd: %v", err)
	}
	cancel()
	s.p = nil
	blobFile := filepath.Join(root, "blobs", layer.Digest.Algorithm().String(), layer.Digest.Encoded())
	if err := os.Remove(blobFile); err != nil {
		t.Fatalf("removing b's layer by hand: %v", err)
	}
	gapThaw(t, agent)

	// While containerd is down.
	down := time.Now()
	eventually(t, "/healthz to say containerd does not answer", func() bool {
		code, _ := agent.get(t, "/healthz")
		return code == 503
	})
	eventually(t, "/readyz to turn 503", func() bool { code, _ := agent.get(t, "/readyz"); return code == 503 })
	for time.Since(down) < outage {
		select {
		case err := <-agent.exited:
			t.Fatalf("holdfast run exited while containerd was down: %v\n%s", err, tail(agent.dump(), 30))
		case <-time.After(time.Second):
		}
		if code, body := agent.get(t, "/healthz"); code != 503 {
			t.Errorf("/healthz while containerd is down: %d %q", code, body)
		}
		if code, body := agent.get(t, "/readyz"); code != 503 {
			t.Errorf("/readyz while containerd is down: %d %q", code, body)
		}
	}
	for _, m := range []string{"go_goroutines", "process_resident_memory_bytes", "process_open_fds"} {
		if v := agent.metric(t, m, nil); v <= 0 {
			t.Errorf("/metrics: %s = %v while containerd is down, want > 0", m, v)
		}
	}
	_, hbody := agent.get(t, "/healthz")
	_, rbody := agent.get(t, "/readyz")
	t.Logf("after %v down: /healthz %q, /readyz %q", outage, strings.TrimSpace(hbody), strings.TrimSpace(rbody))

	// Back: healed, re-imported, ready, and the invariants hold.
	s.start()
	s.d.waitPinned(t, "e2e.local/outage/a:1", "e2e.local/outage/b:1")
	eventually(t, "b's layer imported again from its archive", func() bool {
		_, err := os.Stat(blobFile)
		return err == nil
	})
	available, _, _, missing, err := images.Check(s.d.ctx(), s.d.Client.ContentStore(), recB.Target, platforms.Default())
	if err != nil || !available || len(missing) > 0 {
		t.Errorf("b after the outage: available %v, missing %v, err %v", available, missing, err)
	}
	eventually(t, "/healthz to turn 200", func() bool { code, _ := agent.get(t, "/healthz"); return code == 200 })
	eventually(t, "/readyz to turn 200", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })
	gapScanned(t, agent, imagesDir)
	agent.stop(t)
	crashRemoveMarks(t, imagesDir)
	if bad := invCheck(t, s.d, dataDir, []string{imagesDir}, sources); len(bad) > 0 {
		t.Errorf("invariants after the outage:\n%s", strings.Join(bad, "\n"))
	}
}

// TestLostBlobFileReimported: a layer file removed by hand from the content
// store (containerd's metadata still lists it) is noticed by the next sync,
// which writes it again from the archive; on containerd 2.x and 1.6 alike.
func TestLostBlobFileReimported(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		img := build(t, fixture.ImageSpec{Names: []string{"e2e.local/lost/app:1"}})
		path := filepath.Join(imagesDir, "app.tar")
		writeDockerSave(t, path, img)
		if res := d.sync(t, dataDir, imagesDir); res.Code != 0 {
			t.Fatalf("sync exited %d\n%s", res.Code, res.Stderr)
		}
		rec, _ := d.record(t, "e2e.local/lost/app:1")
		blobs := d.hostBlobs(t, rec.Target)
		layer := blobs[len(blobs)-1]
		file := filepath.Join(directContentRoot(t, d), "blobs", "sha256", layer.Digest.Encoded())
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		if !d.hasBlob(t, layer.Digest) {
			t.Fatal("containerd forgot the blob with its file: nothing left to test")
		}
		if res := d.sync(t, dataDir, imagesDir); res.Code != 0 {
			t.Fatalf("sync after the loss exited %d\n%s", res.Code, res.Stderr)
		}
		if _, err := os.Stat(file); err != nil {
			t.Errorf("the layer's file after the sync: %v", err)
		}
		sources := map[string][]*fixture.Image{path: {img}}
		if bad := invCheck(t, d, dataDir, []string{imagesDir}, sources); len(bad) > 0 {
			t.Errorf("invariants after the sync:\n%s", strings.Join(bad, "\n"))
		}
	})
}

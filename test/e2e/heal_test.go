package e2e

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// The agent's promises that only its own loop can keep: every test here runs
// `holdfast run` with --resync 1h, so a full pass on the timer cannot stand in
// for the behaviour under test.

// TestAgentRetriesFailedImport: a partial OCI archive whose host-platform
// layer is neither in it nor in the store fails to import; once the layer is in
// the store (brought by another data dir's sync, the images dir untouched) a
// retry imports, pins and leases it.
func TestAgentRetriesFailedImport(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	base := sharedLayer(t, 41)
	app := build(t, fixture.ImageSpec{Names: []string{"e2e.local/retry/app:1"}, SharedLayers: []*fixture.Layer{base}})
	other := build(t, fixture.ImageSpec{Names: []string{"e2e.local/retry/base:1"}, SharedLayers: []*fixture.Layer{base}})
	partial := filepath.Join(imagesDir, "app.tar")
	writeArchive(t, partial, fixture.None, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerd, OmitBlobs: []digest.Digest{base.Digest()}}, app)
	})

	agent := startAgent(t, d, dataDir, []string{imagesDir}, "--resync", "1h")
	eventually(t, "the import of the partial archive to fail", func() bool {
		return agent.logged("pass", map[string]string{"level": "ERROR"}) > 0
	})
	if _, ok := d.record(t, "e2e.local/retry/app:1"); ok {
		t.Fatal("the partial archive was imported although its layer was nowhere")
	}

	// The base layer arrives in the store from elsewhere.
	elsewhere := tempDir(t)
	writeArchive(t, filepath.Join(elsewhere, "images", "base.tar"), fixture.None, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerd}, other)
	})
	d.syncOK(t, filepath.Join(elsewhere, "data"), filepath.Join(elsewhere, "images"))
	if !d.hasBlob(t, base.Digest()) {
		t.Fatal("the other sync did not bring the base layer")
	}

	d.waitPinned(t, "e2e.local/retry/app:1")
	l, ok := d.leaseOf(t, partial)
	if !ok {
		t.Fatal("the retried archive has no lease")
	}
	held := d.leaseContent(t, l)
	rec, _ := d.record(t, "e2e.local/retry/app:1")
	for _, b := range d.hostBlobs(t, rec.Target) {
		if !held[b.Digest] {
			t.Errorf("the retried archive's lease lacks %s", b.Digest)
		}
	}
	if n := agent.logged("imported", map[string]string{"path": partial}); n != 1 {
		t.Errorf("app.tar imported %d times, want once\n%s", n, agent.dump())
	}
}

// healSilentRegistry listens on 127.0.0.1 like a registry that is down: until
// hang is called it closes each connection at once (a pull fails fast); after,
// it accepts and never answers (a pull waits for its timeout). accepted gets a
// value for each connection taken after hang.
type healSilentRegistry struct {
	addr     string
	accepted chan struct{}
	mu       sync.Mutex
	hanging  bool
	conns    []net.Conn
}

func healStartSilentRegistry(t *testing.T) *healSilentRegistry {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &healSilentRegistry{addr: ln.Addr().String(), accepted: make(chan struct{}, 64)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			if !r.hanging {
				r.mu.Unlock()
				c.Close()
				continue
			}
			r.conns = append(r.conns, c)
			r.mu.Unlock()
			select {
			case r.accepted <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.conns {
			c.Close()
		}
	})
	return r
}

func (r *healSilentRegistry) hang() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hanging = true
}

// TestAgentHealsDuringFirstPass: an image deleted while the agent's first pass
// is still importing a large archive (and so before that pass has a wanted
// set) is healed once the pass is done, not at the next resync. A pull list
// whose registry hangs holds no pass (pulls run beside the passes), so an
// import holds it: a 256 MiB layer, streamed through the content API, whose
// ingest the test sees.
func TestAgentHealsDuringFirstPass(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	reg := healStartSilentRegistry(t)
	writeDockerSave(t, filepath.Join(imagesDir, "app.tar"), build(t, fixture.ImageSpec{Names: []string{"e2e.local/early/app:1"}}))
	if err := os.WriteFile(filepath.Join(imagesDir, "list.txt"), []byte(reg.addr+"/x:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A first sync leases both sources, so that the agent's first pass finds
	// them unchanged.
	res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--pull-timeout", "2s")
	if res.Code != 1 || !strings.Contains(res.Stderr, reg.addr+"/x:1") {
		t.Fatalf("sync with the registry down: exit %d, want 1 naming the reference\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	d.requirePinned(t, "e2e.local/early/app:1")
	writeDockerSave(t, filepath.Join(imagesDir, "large.tar"), build(t, fixture.ImageSpec{Names: []string{"e2e.local/early/large:1"},
		Layers: []fixture.LayerSpec{{Size: 256 << 20, Compressible: true, Seed: 17}}}))
	// Complete already: the first pass imports it, rather than wait for it to settle.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(imagesDir, "large.tar"), old, old); err != nil {
		t.Fatal(err)
	}

	reg.hang()
	agent := startAgent(t, d, dataDir, []string{imagesDir}, "--resync", "1h", "--pull-timeout", "3s", "--write-path", "stream")
	eventually(t, "the first pass to write the large layer", func() bool {
		st, err := d.Client.ContentStore().ListStatuses(d.ctx())
		return err == nil && len(st) > 0
	})
	rec, ok := d.record(t, "e2e.local/early/app:1")
	if !ok {
		t.Fatal("app is not in the store")
	}
	d.deleteImageSync(t, rec.Target.Digest)
	if agent.logged("pass:", nil) != 0 {
		t.Fatalf("the first pass ended before the delete: nothing is tested\n%s", agent.dump())
	}
	if _, ok := d.record(t, "e2e.local/early/app:1"); ok {
		t.Fatal("the record is still there after its delete")
	}

	d.waitPinned(t, "e2e.local/early/app:1")
	// The heal comes as the first pass ends, just before its summary line.
	eventually(t, "the first pass's summary line", func() bool { return agent.logged("pass:", nil) > 0 })
	if n := agent.logged("pass:", nil); n != 1 {
		t.Errorf("healed after %d passes, want right after the first\n%s", n, agent.dump())
	}
}

// TestAgentPinsLateImageByPattern: an image that arrives after the agent's
// pass (imported by hand with containerd's client) and matches a pin list
// pattern is pinned and leased from its create event; one that matches no
// pattern is left alone.
func TestAgentPinsLateImageByPattern(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	pins := filepath.Join(imagesDir, "keep.pins")
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pins, []byte("*app*\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	agent := startAgent(t, d, dataDir, []string{imagesDir}, "--resync", "1h")
	eventually(t, "ready", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })

	importByHand := func(img *fixture.Image) {
		t.Helper()
		pr, pw := io.Pipe()
		go func() {
			pw.CloseWithError(fixture.WriteOCI(context.Background(), pw, fixture.OCIOptions{Names: fixture.NameContainerd}, img))
		}()
		if _, err := d.Client.Import(d.ctx(), pr); err != nil {
			t.Fatalf("importing %v by hand: %v", img.Names, err)
		}
	}
	importByHand(build(t, fixture.ImageSpec{Names: []string{"e2e.local/late/other:1"}}))
	importByHand(build(t, fixture.ImageSpec{Names: []string{"e2e.local/late/app:1"}}))

	d.waitPinned(t, "e2e.local/late/app:1")
	l, ok := d.leaseOf(t, pins)
	if !ok {
		t.Fatal("the pin list has no lease")
	}
	held := d.leaseContent(t, l)
	rec, _ := d.record(t, "e2e.local/late/app:1")
	for _, b := range d.hostBlobs(t, rec.Target) {
		if !held[b.Digest] {
			t.Errorf("the pin list's lease lacks %s", b.Digest)
		}
	}
	// The pass that pinned app listed other too, which was there before it.
	if cri, hf := d.pinnedBy(t, "e2e.local/late/other:1"); cri || hf {
		t.Errorf("an image no pattern matches was pinned: CRI %v, holdfast %v", cri, hf)
	}
}

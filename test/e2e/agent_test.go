package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/holdfast-project/holdfast/internal/embedded"
	"github.com/holdfast-project/holdfast/internal/fixture"
)

// agentProc is a `holdfast run` the test started.
type agentProc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	logs   []map[string]any
	raw    []string
	addr   string
	exited chan error
	client *http.Client // dials in the agent's network namespace
	// tokenFile is the agent's --token-file, which its reporter reads.
	tokenFile string
}

// startAgent starts `holdfast run` against d and waits until it serves HTTP.
func startAgent(t *testing.T, d *daemon, dataDir string, imageDirs []string, extra ...string) *agentProc {
	t.Helper()
	return startAgentIn(t, "", d, dataDir, imageDirs, extra...)
}

// startAgentIn starts `holdfast run` against d in the network namespace ns
// ("" for the test's own) and waits until it serves HTTP.
func startAgentIn(t *testing.T, ns string, d *daemon, dataDir string, imageDirs []string, extra ...string) *agentProc {
	t.Helper()
	args := []string{"run", "--address", d.Address, "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--settle", "1s", "--log-level", "debug"}
	for _, dir := range imageDirs {
		args = append(args, "--images", dir)
	}
	args = append(args, extra...)
	cmd := exec.Command(holdfastBin, args...)
	client := http.DefaultClient
	if ns != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", ns, holdfastBin}, args...)...)
		client = &http.Client{Transport: &http.Transport{DialContext: dialIn(ns)}}
	}
	cmd.Env = append(os.Environ(), "HOLDFAST_LOG_FORMAT=json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &agentProc{cmd: cmd, exited: make(chan error, 1), client: client, tokenFile: filepath.Join(dataDir, "token")}
	for i, arg := range extra {
		if v, ok := strings.CutPrefix(arg, "--token-file="); ok {
			a.tokenFile = v
		} else if arg == "--token-file" && i+1 < len(extra) {
			a.tokenFile = extra[i+1]
		}
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			var m map[string]any
			_ = json.Unmarshal([]byte(line), &m)
			a.mu.Lock()
			a.raw = append(a.raw, line)
			if m != nil {
				a.logs = append(a.logs, m)
				if addr, ok := m["address"].(string); ok && strings.HasPrefix(fmt.Sprint(m["msg"]), "serving") {
					a.addr = addr
				}
			}
			a.mu.Unlock()
		}
		a.exited <- cmd.Wait()
	}()
	t.Cleanup(func() { a.stop(t) })
	eventually(t, "the agent to serve HTTP", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.addr != ""
	})
	return a
}

func (a *agentProc) stop(t *testing.T) {
	if a.cmd.ProcessState != nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(30 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
		t.Errorf("holdfast run did not stop within 30s of SIGTERM")
	}
}

// logged counts log records whose msg starts with prefix and whose fields match.
func (a *agentProc) logged(prefix string, fields map[string]string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, m := range a.logs {
		if !strings.HasPrefix(fmt.Sprint(m["msg"]), prefix) {
			continue
		}
		ok := true
		for k, v := range fields {
			if fmt.Sprint(m[k]) != v {
				ok = false
			}
		}
		if ok {
			n++
		}
	}
	return n
}

func (a *agentProc) dump() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return strings.Join(a.raw, "\n")
}

func (a *agentProc) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := a.client.Get("http://" + a.addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// put PUTs body to path with the agent's token, as its reporter does, and
// wants 204 No Content.
func (a *agentProc) put(t *testing.T, path, body string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, "http://"+a.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	token, err := os.ReadFile(a.tokenFile)
	if err != nil {
		t.Fatalf("PUT %s: reading the agent's token: %v", path, err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := a.client.Do(req)
	if err != nil {
		t.Fatalf("PUT %s: %v", path, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT %s: %s", path, resp.Status)
	}
}

// metric sums a counter or gauge family across the label sets that match.
func (a *agentProc) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	code, body := a.get(t, "/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	fam, ok := fams[name]
	if !ok {
		return 0
	}
	sum := 0.0
	for _, m := range fam.GetMetric() {
		match := true
		for k, v := range labels {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			match = match && found
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		}
	}
	return sum
}

func (d *daemon) waitPinned(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		eventually(t, n+" pinned", func() bool {
			cri, hf := d.pinnedBy(t, n)
			return cri && hf
		})
	}
}

// TestAgentWatch: with `holdfast run` up, an archive written slowly is imported
// only once complete, a renamed-in one at once, a deleted one is unpinned and
// released, and a sibling directory is never read.
func TestAgentWatch(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	d := startEmbedded(t)
	dir := tempDir(t)
	imagesDir := filepath.Join(dir, "images")
	sibling := filepath.Join(dir, "images-old")
	for _, p := range []string{imagesDir, sibling} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A settle time far longer than the test: a file being written is never
	// complete by its age, however slow the machine. A file is complete here
	// when it gets an old mtime, as a copy that keeps the source's mtime (cp
	// -p, rsync -a) or a rename into place gives it.
	agent := startAgent(t, d, filepath.Join(dir, "data"), []string{imagesDir}, "--settle", "1h")
	eventually(t, "ready", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })
	past := time.Now().Add(-2 * time.Hour)

	// Written in chunks straight into the images dir; after each chunk, a
	// pass that scanned it, and nothing may be imported.
	slow := build(t, fixture.ImageSpec{Names: []string{"e2e.local/watch/slow:1"}, Layers: fixture.UniformLayers(2, 512<<10, false, 31)})
	staging := filepath.Join(dir, "slow.tar")
	writeDockerSave(t, staging, slow)
	data, err := os.ReadFile(staging)
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(imagesDir, "slow.tar")
	f, err := os.Create(target)
	if err != nil {
		t.Fatal(err)
	}
	chunk := len(data)/4 + 1
	for off := 0; off < len(data); off += chunk {
		end := min(off+chunk, len(data))
		if _, err := f.Write(data[off:end]); err != nil {
			t.Fatal(err)
		}
		gapScanned(t, agent, imagesDir)
		if _, ok := d.record(t, "e2e.local/watch/slow:1"); ok {
			t.Fatalf("imported before the file was complete (%d of %d bytes)", end, len(data))
		}
		if n := agent.metric(t, "holdfast_sources", map[string]string{"kind": "archive", "state": "pending"}); n != 1 {
			t.Errorf("holdfast_sources{archive,pending} = %v while slow.tar is being written (%d of %d bytes), want 1", n, end, len(data))
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(target, past, past); err != nil {
		t.Fatal(err)
	}
	d.waitPinned(t, "e2e.local/watch/slow:1")
	for _, line := range strings.Split(agent.dump(), "\n") {
		if strings.Contains(line, "slow.tar") && strings.Contains(line, `"level":"ERROR"`) {
			t.Errorf("an import of the incomplete file was attempted: %s", line)
		}
	}
	if n := agent.logged("imported", map[string]string{"path": target}); n != 1 {
		t.Errorf("slow.tar imported %d times, want once", n)
	}

	// Renamed into place with its old mtime: complete at once.
	quick := build(t, fixture.ImageSpec{Names: []string{"e2e.local/watch/quick:1"}})
	writeDockerSave(t, filepath.Join(dir, "quick.tar"), quick)
	if err := os.Chtimes(filepath.Join(dir, "quick.tar"), past, past); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "quick.tar"), filepath.Join(imagesDir, "quick.tar")); err != nil {
		t.Fatal(err)
	}
	d.waitPinned(t, "e2e.local/watch/quick:1")

	// A sibling dir is never read.
	writeDockerSave(t, filepath.Join(sibling, "old.tar"), build(t, fixture.ImageSpec{Names: []string{"e2e.local/watch/old:1"}}))

	// Deleted: unpinned, lease released, agent still up.
	if err := os.Remove(filepath.Join(imagesDir, "quick.tar")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "quick unpinned", func() bool {
		cri, hf := d.pinnedBy(t, "e2e.local/watch/quick:1")
		return !cri && !hf
	})
	eventually(t, "quick's lease released", func() bool {
		_, ok := d.leaseOf(t, filepath.Join(imagesDir, "quick.tar"))
		return !ok
	})
	if _, ok := d.record(t, "e2e.local/watch/old:1"); ok {
		t.Error("an archive in a sibling dir was imported")
	}
	if _, ok := d.leaseOf(t, filepath.Join(sibling, "old.tar")); ok {
		t.Error("an archive in a sibling dir was leased")
	}
	d.requirePinned(t, "e2e.local/watch/slow:1")
}

// TestAgentHeal: with `holdfast run` up, every way of losing a pinned image is
// undone from leased content: crictl rmi, an image-service delete (after which
// GC really ran), a stripped CRI pin label, and a re-point.
func TestAgentHeal(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	d := startEmbedded(t)
	dir := tempDir(t)
	imagesDir := filepath.Join(dir, "images")
	app := build(t, fixture.ImageSpec{Names: []string{"e2e.local/heal/app:1", "e2e.local/heal/app:stable"}})
	other := build(t, fixture.ImageSpec{Names: []string{"e2e.local/heal/other:1"}})
	writeDockerSave(t, filepath.Join(imagesDir, "app.tar"), app)
	writeDockerSave(t, filepath.Join(imagesDir, "other.tar"), other)
	agent := startAgent(t, d, filepath.Join(dir, "data"), []string{imagesDir})
	eventually(t, "ready", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })
	names := []string{"e2e.local/heal/app:1", "e2e.local/heal/app:stable"}
	d.waitPinned(t, names...)
	heals := func() float64 { return agent.metric(t, "holdfast_heals_total", nil) }

	check := func(what string) {
		t.Helper()
		d.waitPinned(t, names...)
		eventually(t, "CRI to report "+what+" healed and pinned", func() bool {
			found, pinned := d.criImage(t, "e2e.local/heal/app:1")
			return found && pinned
		})
	}

	// crictl rmi removes every name of the image.
	before := heals()
	d.crictl(t, "rmi", "e2e.local/heal/app:1")
	check("crictl rmi")
	// The counter moves just after the record is back: wait for it too.
	eventually(t, "holdfast_heals_total to move after crictl rmi", func() bool { return heals() > before })

	// A synchronous delete of every record of it: GC runs (an unleased control
	// image deleted the same way loses its blobs), the lease keeps the content.
	// The agent is stopped meanwhile, so that no record it re-creates from
	// the delete events can be what keeps the content through the GC.
	control := build(t, fixture.ImageSpec{Names: []string{"e2e.local/heal/control:1"}})
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(fixture.WriteOCI(context.Background(), pw, fixture.OCIOptions{Names: fixture.NameContainerd}, control))
	}()
	if _, err := d.Client.Import(d.ctx(), pr); err != nil {
		t.Fatalf("importing the control image: %v", err)
	}
	controlLayer := control.Manifests[0].Layers[0].Digest()
	rec, _ := d.record(t, "e2e.local/heal/app:1")
	blobs := d.hostBlobs(t, rec.Target)
	lease, ok := d.leaseOf(t, filepath.Join(imagesDir, "app.tar"))
	if !ok {
		t.Fatal("app.tar has no lease")
	}
	// The CRI must know both images before the agent stops (deleteImageSync waits for it).
	eventually(t, "the CRI to know the control image", func() bool {
		found, _ := d.criImage(t, "e2e.local/heal/control:1")
		return found
	})
	gapFreeze(t, agent)
	d.deleteImageSync(t, control.Target.Digest)
	d.deleteImageSync(t, rec.Target.Digest)
	eventually(t, "GC to remove the control image's layer", func() bool { return !d.hasBlob(t, controlLayer) })
	for _, n := range names {
		if _, ok := d.record(t, n); ok {
			t.Fatalf("%s is back although the agent is stopped", n)
		}
	}
	held := d.leaseContent(t, lease)
	for _, b := range blobs {
		if !held[b.Digest] {
			t.Errorf("app.tar's lease lacks %s %s", b.MediaType, b.Digest)
		}
		if !d.hasBlob(t, b.Digest) {
			t.Errorf("GC removed %s %s: only the lease held it", b.MediaType, b.Digest)
		}
	}
	gapThaw(t, agent)
	check("image-service delete")
	for _, b := range d.hostBlobs(t, rec.Target) {
		if !d.hasBlob(t, b.Digest) {
			t.Errorf("blob %s gone after heal", b.Digest)
		}
	}

	// The CRI pin label stripped.
	rec, _ = d.record(t, "e2e.local/heal/app:1")
	delete(rec.Labels, "io.cri-containerd.pinned")
	if _, err := d.Client.ImageService().Update(d.ctx(), rec, "labels.io.cri-containerd.pinned"); err != nil {
		t.Fatal(err)
	}
	check("stripped label")

	// Re-pointed at another image, as ctr images tag --force does.
	want := rec.Target.Digest
	otherRec, _ := d.record(t, "e2e.local/heal/other:1")
	rec, _ = d.record(t, "e2e.local/heal/app:1")
	rec.Target = otherRec.Target
	if _, err := d.Client.ImageService().Update(d.ctx(), rec, "target"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the re-pointed record restored", func() bool {
		r, _ := d.record(t, "e2e.local/heal/app:1")
		return r.Target.Digest == want
	})
	eventually(t, "holdfast_drift_total to move", func() bool { return agent.metric(t, "holdfast_drift_total", nil) >= 1 })
}

// TestAgentReconnect: containerd killed and restarted under the agent; the
// agent reconnects, runs a full pass (logged with trigger=reconnect) and heals
// an image deleted right after the restart.
func TestAgentReconnect(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	dir := tempDir(t)
	cdir := filepath.Join(dir, "c")
	start := func() *embedded.Process {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p, err := embedded.Start(ctx, cdir, embedded.Options{Binary: holdfastBin})
		if err != nil {
			t.Fatalf("starting containerd: %v", err)
		}
		return p
	}
	p := start()
	d := connect(t, "embedded", p.Address(), false)
	imagesDir := filepath.Join(dir, "images")
	writeDockerSave(t, filepath.Join(imagesDir, "app.tar"), build(t, fixture.ImageSpec{Names: []string{"e2e.local/rc/app:1"}}))
	agent := startAgent(t, d, filepath.Join(dir, "data"), []string{imagesDir})
	d.waitPinned(t, "e2e.local/rc/app:1")

	// Kill containerd outright, then start it again on the same root.
	if err := syscall.Kill(p.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_ = p.Stop(stopCtx)
	cancel()
	p = start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = p.Stop(ctx)
	})
	eventually(t, "the client to reconnect", func() bool {
		_, err := d.Client.Version(context.Background())
		return err == nil
	})
	rec, ok := d.record(t, "e2e.local/rc/app:1")
	if !ok {
		t.Fatal("record gone after a restart")
	}
	d.deleteImageSync(t, rec.Target.Digest)
	d.waitPinned(t, "e2e.local/rc/app:1")
	eventually(t, "the agent to say it reconnected", func() bool { return agent.logged("reconnected", nil) > 0 })
	// The full pass after the reconnect, which heals what was lost meanwhile.
	eventually(t, "a pass logged with trigger=reconnect", func() bool {
		return agent.logged("pass: ", map[string]string{"trigger": "reconnect"}) > 0
	})
	if code, body := agent.get(t, "/healthz"); code != 200 {
		t.Errorf("/healthz after reconnect: %d %s", code, body)
	}
}

// TestAgentReadiness: with the last source of the first pass still being
// written when the agent starts, /readyz is 503 after the agent's passes have
// seen it, until that image is pinned in CRI, then turns 200;
// holdfast_sources and holdfast_imports_total follow.
func TestAgentReadiness(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	fast := build(t, fixture.ImageSpec{Names: []string{"e2e.local/ready/fast:1"}})
	slow := build(t, fixture.ImageSpec{Names: []string{"e2e.local/ready/slow:1"}, Layers: fixture.UniformLayers(2, 256<<10, false, 77)})
	writeDockerSave(t, filepath.Join(imagesDir, "a-fast.tar"), fast)
	staging := filepath.Join(filepath.Dir(imagesDir), "slow.tar")
	writeDockerSave(t, staging, slow)
	data, err := os.ReadFile(staging)
	if err != nil {
		t.Fatal(err)
	}
	// All but the last bytes. The agent's settle time is far longer than
	// the test, so the file is still being written however long the agent
	// takes to look at it; it is complete once it gets an old mtime, as a
	// copy that keeps the source's mtime gives it. a-fast.tar has one.
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(imagesDir, "a-fast.tar"), past, past); err != nil {
		t.Fatal(err)
	}
	slowPath := filepath.Join(imagesDir, "z-slow.tar")
	if err := os.WriteFile(slowPath, data[:len(data)-1], 0o644); err != nil {
		t.Fatal(err)
	}

	agent := startAgent(t, d, dataDir, []string{imagesDir}, "--settle", "1h")
	d.waitPinned(t, "e2e.local/ready/fast:1")
	gapScanned(t, agent, imagesDir)
	if code, body := agent.get(t, "/readyz"); code != 503 || !strings.Contains(body, "z-slow.tar") {
		t.Fatalf("/readyz while the last source is being written: %d %q", code, body)
	}
	if n := agent.metric(t, "holdfast_sources", map[string]string{"kind": "archive", "state": "pending"}); n != 1 {
		t.Errorf("holdfast_sources{archive,pending} = %v while z-slow.tar is being written, want 1", n)
	}
	if _, ok := d.record(t, "e2e.local/ready/slow:1"); ok {
		t.Errorf("z-slow.tar was imported while being written")
	}
	// The last byte, and the old mtime: now it is complete.
	f, err := os.OpenFile(slowPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data[len(data)-1:]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(slowPath, past, past); err != nil {
		t.Fatal(err)
	}
	eventually(t, "/readyz to turn 200", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })
	if found, pinned := d.criImage(t, "e2e.local/ready/slow:1"); !found || !pinned {
		t.Errorf("ready before the last image was pinned in CRI: found %v pinned %v", found, pinned)
	}
	if n := agent.metric(t, "holdfast_imports_total", map[string]string{"result": "imported"}); n != 2 {
		t.Errorf("holdfast_imports_total{result=imported} = %v, want 2", n)
	}
	if n := agent.metric(t, "holdfast_sources", map[string]string{"kind": "archive", "state": "applied"}); n != 2 {
		t.Errorf("holdfast_sources{archive,applied} = %v, want 2", n)
	}
}

// gapScanned waits until the agent has finished a pass that scanned dir after
// this call: it drops a file the scan skips (not an image archive) and waits
// for the end of the pass that logged skipping it.
func gapScanned(t *testing.T, a *agentProc, dir string) {
	t.Helper()
	f, err := os.CreateTemp(dir, "scan-mark-")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("not an image\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	mark := f.Name()
	eventually(t, "a pass that scanned "+mark, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		seen := false
		for _, m := range a.logs {
			msg := fmt.Sprint(m["msg"])
			if msg == "skipped" && fmt.Sprint(m["path"]) == mark {
				seen = true
			} else if seen && strings.HasPrefix(msg, "pass: ") {
				return true
			}
		}
		return false
	})
}

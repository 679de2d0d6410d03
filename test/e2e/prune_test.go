package e2e

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

var (
	ctrOnce sync.Once
	ctrPath string
	ctrErr  error
)

// ctrBin is containerd 2.x's ctr, built from the containerd module the
// project requires, once per run, beside the holdfast binary. Debian's
// containerd 1.6 ships a ctr of its own, but it has no `images prune`; the
// 2.x ctr speaks to 1.6 as well.
func ctrBin(t *testing.T) string {
	t.Helper()
	ctrOnce.Do(func() {
		out := filepath.Join(filepath.Dir(holdfastBin), "ctr")
		cmd := exec.Command("go", "build", "-trimpath", "-o", out, "github.com/containerd/containerd/v2/cmd/ctr")
		cmd.Dir = repoRoot()
		if b, err := cmd.CombinedOutput(); err != nil {
			ctrErr = fmt.Errorf("go build ctr: %w\n%s", err, b)
			return
		}
		ctrPath = out
	})
	if ctrErr != nil {
		t.Fatalf("building ctr: %v", ctrErr)
	}
	return ctrPath
}

// ctr runs containerd 2.x's ctr against d with args (global flags first),
// with neither CONTAINERD_NAMESPACE nor CONTAINERD_ADDRESS from the test's
// environment, and returns what it printed.
func (d *daemon) ctr(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(ctrBin(t), append([]string{"--address", d.Address}, args...)...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "CONTAINERD_NAMESPACE=") || strings.HasPrefix(kv, "CONTAINERD_ADDRESS=")
	})
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ctr %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// pruneDeleted are the names `ctr images prune` logged as deleted.
func pruneDeleted(out string) []string {
	var names []string
	for _, line := range strings.Split(out, "\n") {
		// logrus's text: msg="deleted image: NAME\n" (the newline escaped).
		if _, rest, ok := strings.Cut(line, "deleted image: "); ok {
			names = append(names, strings.TrimSuffix(strings.TrimSuffix(strings.TrimSpace(rest), `"`), `\n`))
		}
	}
	return names
}

// TestAgentHealsAfterCtrPrune: `ctr images prune --all` deletes every image
// no container uses, pinned ones too. Under `holdfast run`, every name
// holdfast pinned (its repo@digest names too) comes back with both pin
// labels and no prior-pin mark, and the CRI knows it again, while an
// unpinned control image imported by containerd's importer stays gone, its
// layer collected. ctr works in its own namespace ("default") unless told:
// without --namespace k8s.io, prune leaves the CRI's images alone. The prune
// is run once with the agent watching, and once with the agent stopped, so
// that containerd's GC runs while no record holds the pinned content and only
// holdfast's leases keep it.
func TestAgentHealsAfterCtrPrune(t *testing.T) {
	forEachLine(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		app := build(t, fixture.ImageSpec{Names: []string{"e2e.local/prune/app:1", "e2e.local/prune/app:stable"}})
		multi := build(t, fixture.ImageSpec{Names: []string{"e2e.local/prune/multi:1"},
			Platforms: []fixture.Platform{fixture.HostPlatform(), {OS: "linux", Architecture: "s390x"}}})
		writeDockerSave(t, filepath.Join(imagesDir, "app.tar"), app)
		writeOCIArchive(t, filepath.Join(imagesDir, "multi.tar"), multi)
		targets := map[string]digest.Digest{}
		for _, img := range []*fixture.Image{app, multi} {
			for _, n := range img.Names {
				targets[n] = ""
			}
		}
		agent := startAgent(t, d, dataDir, []string{imagesDir})
		eventually(t, "ready", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })
		for n := range targets {
			d.waitPinned(t, n)
			rec, _ := d.record(t, n)
			targets[n] = rec.Target.Digest
		}
		for _, n := range slices.Collect(maps.Keys(targets)) {
			repo, _, _ := strings.Cut(n, ":")
			targets[repo+"@"+targets[n].String()] = targets[n]
		}
		names := slices.Sorted(maps.Keys(targets))
		d.waitPinned(t, names...)
		heals := func() float64 { return agent.metric(t, "holdfast_heals_total", nil) }

		// healed waits until every name is back at its target with both
		// pins, the CRI resolving it (and reporting it pinned where it
		// reports pins).
		healed := func(when string) {
			t.Helper()
			d.waitPinned(t, names...)
			for _, n := range names {
				rec, _ := d.record(t, n)
				if rec.Target.Digest != targets[n] {
					t.Errorf("%s: %s points at %s, want %s", when, n, rec.Target.Digest, targets[n])
				}
				rtNoPriorPin(t, d, n, when)
				eventually(t, "the CRI to know "+n+" "+when, func() bool {
					img, found := d.inspecti(t, n)
					return found && (d.Old || img.Pinned)
				})
			}
		}

		// controlImage imports an unpinned image with containerd's own
		// importer and waits until the CRI knows it (so that its sha256:
		// record is there before the prune).
		controlImage := func(name string) (digest.Digest, digest.Digest) {
			t.Helper()
			c := build(t, fixture.ImageSpec{Names: []string{name}})
			keepCtrImport(t, d, c)
			eventually(t, "the CRI to know "+name, func() bool { _, found := d.inspecti(t, name); return found })
			if cri, hf := d.pinnedBy(t, name); cri || hf {
				t.Fatalf("%s is pinned (CRI %v, holdfast %v) although holdfast never saw it", name, cri, hf)
			}
			return c.Target.Digest, c.Manifests[0].Layers[0].Digest()
		}
		gone := func(name string, target, layer digest.Digest) {
			t.Helper()
			for _, n := range d.recordNames(t) {
				if rec, _ := d.record(t, n); n == name || rec.Target.Digest == target {
					t.Errorf("the control image's record %s is still there after the prune", n)
				}
			}
			eventually(t, "GC to remove the control image's layer", func() bool { return !d.hasBlob(t, layer) })
			if _, found := d.inspecti(t, name); found {
				t.Errorf("the CRI still knows %s after the prune", name)
			}
		}

		// Without --namespace, ctr prunes the "default" namespace: nothing
		// of the CRI's is touched.
		control1, layer1 := controlImage("e2e.local/prune/control:1")
		before := d.recordNames(t)
		out := d.ctr(t, "images", "prune", "--all")
		if del := pruneDeleted(out); len(del) != 0 {
			t.Errorf("ctr images prune --all in the default namespace deleted %v", del)
		}
		if after := d.recordNames(t); !slices.Equal(after, before) {
			t.Errorf("records in %s before ctr images prune --all without --namespace: %v; after: %v", namespace, before, after)
		}

		// With --namespace k8s.io, the agent watching: every record goes,
		// pinned ones too, and the agent brings back what it pinned.
		healsBefore := heals()
		out = d.ctr(t, "--namespace", namespace, "images", "prune", "--all")
		del := pruneDeleted(out)
		for _, n := range append([]string{"e2e.local/prune/control:1"}, names...) {
			if !slices.Contains(del, n) {
				t.Errorf("ctr images prune --all did not delete %s; it deleted %v\n%s", n, del, out)
			}
		}
		healed("after a prune under the agent")
		eventually(t, "holdfast_heals_total to move after the prune", func() bool { return heals() > healsBefore })
		gone("e2e.local/prune/control:1", control1, layer1)

		// With the agent stopped: the prune's last delete is synchronous,
		// so containerd's GC has run when ctr returns (the control image's
		// layer is gone), while no record held the pinned images' content:
		// the leases alone kept it, and the agent heals from them.
		control2, layer2 := controlImage("e2e.local/prune/control:2")
		blobs := map[string][]digest.Digest{}
		for _, n := range names {
			rec, _ := d.record(t, n)
			for _, b := range d.hostBlobs(t, rec.Target) {
				blobs[n] = append(blobs[n], b.Digest)
			}
		}
		gapFreeze(t, agent)
		out = d.ctr(t, "--namespace", namespace, "images", "prune", "--all")
		if left := d.recordNames(t); len(left) != 0 {
			t.Fatalf("records left after ctr images prune --all: %v\n%s", left, out)
		}
		if d.hasBlob(t, layer2) {
			t.Fatal("the control image's layer is still there when ctr images prune returned: GC did not run")
		}
		for n, bs := range blobs {
			for _, b := range bs {
				if !d.hasBlob(t, b) {
					t.Errorf("GC removed %s of %s, which holdfast's lease holds", b, n)
				}
			}
		}
		gapThaw(t, agent)
		healed("after a prune while the agent was stopped")
		gone("e2e.local/prune/control:2", control2, layer2)
		if t.Failed() {
			t.Logf("agent log:\n%s", tail(agent.dump(), 60))
		}
	})
}

package e2e

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

const (
	// expiryLabel is containerd's expiry of a record (2.x collects an
	// expired record unless a lease holds it).
	expiryLabel = "containerd.io/gc.expire"
	// expiryHoldLease is the lease that holds the records holdfast pins.
	expiryHoldLease = "io.holdfast.records"
	// expiryReport starts the log line that reports a record's expiry.
	expiryReport = "a record holdfast pins carries an expiry"
)

// TestExpiredRecordKept: a record holdfast pins, on which another writer set
// an expiry that has passed (ctr images label), keeps its name through
// containerd's GC, after a `holdfast sync` and under `holdfast run`, without
// a heal: the record is never recreated. The GC is shown to have run by an
// unleased control image that lost its blobs. Each such record is reported
// once, over two passes of the agent. On 1.6, whose GC keeps every record,
// the label changes nothing: the record stays, and holdfast neither holds
// nor reports anything.
func TestExpiredRecordKept(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
		synced, ran, late := "e2e.local/expiry/synced:1", "e2e.local/expiry/ran:1", "e2e.local/expiry/late:1"
		writeDockerSave(t, filepath.Join(imagesDir, "synced.tar"), build(t, fixture.ImageSpec{Names: []string{synced}}))
		d.syncOK(t, dataDir, imagesDir)
		d.requirePinned(t, synced)

		// After a sync: the label comes, a sync runs, the GC runs.
		d.labelRecord(t, synced, expiryLabel, past)
		res := d.sync(t, dataDir, imagesDir)
		if res.Code != 0 {
			t.Fatalf("sync exited %d\n%s", res.Code, res.Stderr)
		}
		before, _ := d.record(t, synced)
		d.gcWithControl(t, "e2e.local/expiry/control-sync:1")
		after, ok := d.record(t, synced)
		if !ok || !after.CreatedAt.Equal(before.CreatedAt) {
			t.Fatalf("%s, pinned by holdfast with an expiry in the past, lost its record to the GC (found %v)", synced, ok)
		}
		if c := d.syncOK(t, dataDir, imagesDir); c["healed"] != 0 {
			t.Errorf("a sync after the GC healed: %v", c)
		}
		var st struct {
			Images []struct {
				Name    string `json:"name"`
				Expires string `json:"expires"`
			} `json:"images"`
		}
		readStatus(t, &st, "--address", d.Address, "--data-dir", dataDir)
		shown := "(no image)"
		for _, img := range st.Images {
			if img.Name == synced {
				shown = img.Expires
			}
		}
		if shown != past {
			t.Errorf("status shows %s's expiry as %q, want %s", synced, shown, past)
		}
		reports := strings.Count(res.Stderr, expiryReport)
		switch {
		case d.Old && reports != 0:
			t.Errorf("on 1.6, whose GC keeps every record, the sync reported %d expiries:\n%s", reports, res.Stderr)
		case !d.Old && (reports != 1 || !strings.Contains(res.Stderr, past)):
			t.Errorf("the sync reported %s's expiry %d times, want once naming %s:\n%s", synced, reports, past, res.Stderr)
		}

		// Under run: a record the agent pinned is labelled, the GC runs,
		// then a second pass (a new archive) runs.
		agent := startAgent(t, d, dataDir, []string{imagesDir}, "--resync", "1h")
		writeDockerSave(t, filepath.Join(imagesDir, "ran.tar"), build(t, fixture.ImageSpec{Names: []string{ran}}))
		d.waitPinned(t, ran)
		d.labelRecord(t, ran, expiryLabel, past)
		if !d.Old {
			eventually(t, "the agent to report "+ran+"'s expiry", func() bool {
				return agent.logged(expiryReport, map[string]string{"name": ran, "expire": past}) > 0
			})
		}
		before, _ = d.record(t, ran)
		d.gcWithControl(t, "e2e.local/expiry/control-run:1")
		writeDockerSave(t, filepath.Join(imagesDir, "late.tar"), build(t, fixture.ImageSpec{Names: []string{late}}))
		d.waitPinned(t, late)
		after, ok = d.record(t, ran)
		if !ok || !after.CreatedAt.Equal(before.CreatedAt) {
			t.Errorf("%s, pinned by the agent with an expiry in the past, lost its record to the GC (found %v, healed %d times)\n%s",
				ran, ok, agent.logged("healed", map[string]string{"name": ran}), agent.dump())
		}
		for _, name := range []string{synced, ran} {
			want := 1
			if d.Old {
				want = 0
			}
			if n := agent.logged(expiryReport, map[string]string{"name": name}); n != want {
				t.Errorf("the agent reported %s's expiry %d times over two passes, want %d", name, n, want)
			}
		}
		held := d.heldRecords(t)
		for _, name := range []string{synced, ran, late} {
			if held[name] == d.Old {
				t.Errorf("%s held by %s: %v (on 1.6 no hold is made)", name, expiryHoldLease, held[name])
			}
		}
	})
}

// labelRecord sets one label of a record as another writer does (ctr images
// label): that label's path only.
func (d *daemon) labelRecord(t *testing.T, name, key, value string) {
	t.Helper()
	img, ok := d.record(t, name)
	if !ok {
		t.Fatalf("labelling %s: no record", name)
	}
	img.Labels = map[string]string{key: value}
	if _, err := d.Client.ImageService().Update(d.ctx(), img, "labels."+key); err != nil {
		t.Fatalf("labelling %s: %v", name, err)
	}
}

// forceGC runs containerd's GC and returns when it is done: a record of
// target made and deleted with a synchronous delete.
func (d *daemon) forceGC(t *testing.T, target ocispec.Descriptor) {
	t.Helper()
	name := "e2e.local/gc-trigger/" + strings.ReplaceAll(time.Now().Format("150405.000000000"), ".", "-") + ":1"
	if _, err := d.Client.ImageService().Create(d.ctx(), images.Image{Name: name, Target: target}); err != nil {
		t.Fatalf("making a record to delete: %v", err)
	}
	if err := d.Client.ImageService().Delete(d.ctx(), name, images.SynchronousDelete()); err != nil {
		t.Fatalf("deleting %s: %v", name, err)
	}
}

// gcWithControl imports an unleased control image, deletes it with a
// synchronous delete and waits until the GC has taken its layer: the GC ran.
func (d *daemon) gcWithControl(t *testing.T, name string) {
	t.Helper()
	control := build(t, fixture.ImageSpec{Names: []string{name}})
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(fixture.WriteOCI(context.Background(), pw, fixture.OCIOptions{Names: fixture.NameContainerd}, control))
	}()
	if _, err := d.Client.Import(d.ctx(), pr); err != nil {
		t.Fatalf("importing the control image: %v", err)
	}
	layer := control.Manifests[0].Layers[0].Digest()
	if !d.hasBlob(t, layer) {
		t.Fatal("the control image's layer is not in the store")
	}
	d.deleteImageSync(t, control.Target.Digest)
	eventually(t, "the GC to take the control image's layer", func() bool { return !d.hasBlob(t, layer) })
}

// heldRecords is the names the lease of the records holdfast pins holds.
func (d *daemon) heldRecords(t *testing.T) map[string]bool {
	t.Helper()
	held := map[string]bool{}
	res, err := d.Client.LeasesService().ListResources(d.ctx(), leases.Lease{ID: expiryHoldLease})
	if err != nil && !strings.Contains(err.Error(), "not found") {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Type == "images" {
			held[r.ID] = true
		}
	}
	return held
}

package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

const (
	rtLabelPinned   = "io.holdfast.pinned"
	rtLabelCRIPin   = "io.cri-containerd.pinned"
	rtLabelPriorPin = "io.holdfast.prior-pin"
)

// rtStripHoldfastPin removes only holdfast's own pin label from a record, as
// a careless tool or a person with ctr might: the CRI's pin stays.
func rtStripHoldfastPin(t *testing.T, d *daemon, name string) {
	t.Helper()
	rec, ok := d.record(t, name)
	if !ok {
		t.Fatalf("no record %s", name)
	}
	delete(rec.Labels, rtLabelPinned)
	// The record as the update left it (an agent may heal it at once).
	got, err := d.Client.ImageService().Update(d.ctx(), rec, "labels."+rtLabelPinned)
	if err != nil {
		t.Fatalf("stripping %s from %s: %v", rtLabelPinned, name, err)
	}
	if got.Labels[rtLabelCRIPin] != "pinned" || got.Labels[rtLabelPinned] != "" {
		t.Fatalf("after stripping: labels %v; want only the CRI's pin", got.Labels)
	}
}

// rtNoPriorPin fails when a record carries holdfast's prior-pin label.
func rtNoPriorPin(t *testing.T, d *daemon, name, when string) {
	t.Helper()
	rec, _ := d.record(t, name)
	if v, ok := rec.Labels[rtLabelPriorPin]; ok {
		t.Errorf("%s: %s carries %s=%s, but the only pin before holdfast's was holdfast's own: %v", when, name, rtLabelPriorPin, v, rec.Labels)
	}
}

// rtUnpinned checks that no pin of any kind is left on name, and that the CRI
// (on containerd versions that report pins) no longer reports it pinned.
func rtUnpinned(t *testing.T, d *daemon, name string) {
	t.Helper()
	rec, ok := d.record(t, name)
	if !ok {
		t.Fatalf("record %s is gone; unpinning keeps records", name)
	}
	for _, l := range []string{rtLabelCRIPin, rtLabelPinned, rtLabelPriorPin} {
		if v, ok := rec.Labels[l]; ok {
			t.Errorf("%s still carries %s=%s after its archive went: %v", name, l, v, rec.Labels)
		}
	}
	if !d.Old {
		eventually(t, "the CRI to report "+name+" unpinned", func() bool {
			found, pinned := d.criImage(t, name)
			return found && !pinned
		})
	}
}

// TestSyncHealOfHoldfastLabelKeepsNoPriorPin: a record that lost only
// holdfast's pin label is healed by a sync without mistaking the CRI pin
// holdfast itself set for a user's; when the archive goes, the image is
// unpinned for good, so the kubelet can collect it.
func TestSyncHealOfHoldfastLabelKeepsNoPriorPin(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		name := "e2e.local/rtpin/sync:1"
		path := filepath.Join(imagesDir, "app.tar")
		writeDockerSave(t, path, build(t, fixture.ImageSpec{Names: []string{name}}))
		d.syncOK(t, dataDir, imagesDir)
		d.requirePinned(t, name)
		rtNoPriorPin(t, d, name, "first pin")

		rtStripHoldfastPin(t, d, name)
		if c := d.syncOK(t, dataDir, imagesDir); c["healed"] != 1 || c["imported"] != 0 {
			t.Errorf("heal sync: %v, want 1 healed, 0 imported", c)
		}
		d.requirePinned(t, name)
		rtNoPriorPin(t, d, name, "after the heal")

		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if c := d.syncOK(t, dataDir, imagesDir); c["unpinned"] < 1 {
			t.Errorf("sync after removing the archive: %v, want the image unpinned", c)
		}
		rtUnpinned(t, d, name)
	})
}

// TestAgentHealOfHoldfastLabelKeepsNoPriorPin: the same under `holdfast run`,
// where the image event heals the record at once.
func TestAgentHealOfHoldfastLabelKeepsNoPriorPin(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		name := "e2e.local/rtpin/agent:1"
		path := filepath.Join(imagesDir, "app.tar")
		writeDockerSave(t, path, build(t, fixture.ImageSpec{Names: []string{name}}))
		agent := startAgent(t, d, dataDir, []string{imagesDir})
		eventually(t, "ready", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })
		d.waitPinned(t, name)
		rtNoPriorPin(t, d, name, "first pin")

		before := agent.metric(t, "holdfast_heals_total", nil)
		rtStripHoldfastPin(t, d, name)
		eventually(t, "the agent to heal the label", func() bool {
			return agent.metric(t, "holdfast_heals_total", nil) > before
		})
		d.requirePinned(t, name)
		rtNoPriorPin(t, d, name, "after the event heal")

		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the agent to unpin "+name, func() bool {
			_, hf := d.pinnedBy(t, name)
			return !hf
		})
		rtUnpinned(t, d, name)
		if t.Failed() {
			t.Logf("agent log:\n%s", tail(agent.dump(), 40))
		}
	})
}

// rtIngest is an ingest a test opened in the content store, as another
// holdfast process importing beside the one under test would.
type rtIngest struct {
	ref  string
	data []byte
	ctx  context.Context // with the test's lease
	w    content.Writer
}

// rtOpenIngest opens an ingest of data under ref (and a lease of the test's,
// so a committed blob stays), and writes its first half.
func rtOpenIngest(t *testing.T, d *daemon, ref string, data []byte) *rtIngest {
	t.Helper()
	l, err := d.Client.LeasesService().Create(d.ctx(), leases.WithID("rt-e2e/"+ref))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Client.LeasesService().Delete(context.Background(), l) })
	ctx := leases.WithLease(d.ctx(), l.ID)
	w, err := content.OpenWriter(ctx, d.Client.ContentStore(), content.WithRef(ref),
		content.WithDescriptor(ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(data), Size: int64(len(data))}))
	if err != nil {
		t.Fatalf("opening ingest %s: %v", ref, err)
	}
	if _, err := w.Write(data[:len(data)/2]); err != nil {
		t.Fatalf("writing ingest %s: %v", ref, err)
	}
	return &rtIngest{ref: ref, data: data, ctx: ctx, w: w}
}

// finish writes the rest and commits; the blob must then be in the store.
func (i *rtIngest) finish(t *testing.T, d *daemon) {
	t.Helper()
	defer i.w.Close()
	if _, err := i.w.Write(i.data[len(i.data)/2:]); err != nil {
		t.Fatalf("writing the rest of ingest %s: %v", i.ref, err)
	}
	dg := digest.FromBytes(i.data)
	if err := i.w.Commit(d.ctx(), int64(len(i.data)), dg); err != nil {
		t.Fatalf("committing ingest %s: %v", i.ref, err)
	}
	if !d.hasBlob(t, dg) {
		t.Errorf("blob %s of ingest %s is not in the store after its commit", dg, i.ref)
	}
}

// rtContentRoot is the content store's directory on the containerd host.
func rtContentRoot(t *testing.T, d *daemon) string {
	t.Helper()
	resp, err := d.Client.IntrospectionService().Plugins(d.ctx(), `type=="io.containerd.content.v1"`)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range resp.Plugins {
		if root := p.Exports["root"]; root != "" {
			return root
		}
	}
	t.Fatal("the content plugin exports no root")
	return ""
}

// age makes the ingest look untouched for age, its writer hung: the local
// content store reports the later of its updatedat file (written when a
// writer closes) and its data file's mtime.
func (i *rtIngest) age(t *testing.T, d *daemon, age time.Duration) {
	t.Helper()
	// Closing the writer ends the server's side asynchronously, and that
	// writes updatedat: reopening the ingest waits until it is done (the
	// client retries while the ref is locked), and the new writer, kept
	// open, writes nothing.
	if err := i.w.Close(); err != nil {
		t.Fatal(err)
	}
	w, err := content.OpenWriter(i.ctx, d.Client.ContentStore(), content.WithRef(i.ref),
		content.WithDescriptor(ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(i.data), Size: int64(len(i.data))}))
	if err != nil {
		t.Fatalf("reopening ingest %s: %v", i.ref, err)
	}
	i.w = w
	t.Cleanup(func() { _ = w.Close() })

	dirs, err := filepath.Glob(filepath.Join(rtContentRoot(t, d), "ingest", "*"))
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-age)
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "ref"))
		// The store's own ref is "<namespace>/<sequence>/<ref>".
		if err != nil || !strings.HasSuffix(string(b), "/"+i.ref) {
			continue
		}
		stamp, err := old.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "updatedat"), stamp, 0o666); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(filepath.Join(dir, "data"), old, old); err != nil {
			t.Fatal(err)
		}
		st, err := d.Client.ContentStore().Status(d.ctx(), i.ref)
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(st.UpdatedAt) < age-time.Minute {
			t.Fatalf("ingest %s still reports an update at %s after ageing", i.ref, st.UpdatedAt)
		}
		return
	}
	t.Fatalf("no ingest directory for %s", i.ref)
}

// rtIngestData is a blob's worth of bytes, distinct per seed.
func rtIngestData(seed string) []byte {
	return bytes.Repeat([]byte("an upload in progress, "+seed+"; "), 2048)
}

// TestSyncSparesAnotherHoldfastsIngest: a one-off `holdfast sync` with its own
// data dir, on the containerd an agent imports into, leaves the agent's
// in-flight ingest alone: it can still be written and committed.
func TestSyncSparesAnotherHoldfastsIngest(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		name := "e2e.local/rting/usb:1"
		writeDockerSave(t, filepath.Join(imagesDir, "usb.tar"), build(t, fixture.ImageSpec{Names: []string{name}}))

		// A ref as another holdfast (another data dir) writes it:
		// holdfast-<owner>-<run>-<import>-<n>.
		other := rtOpenIngest(t, d, "holdfast-0a1b2c3d4e5f6a7b-8899aabb-ccddeeff0011-1", rtIngestData("other"))
		d.syncOK(t, filepath.Join(dir, "scratch"), imagesDir)
		d.requirePinned(t, name)
		if refs := d.ingests(t); !slices.Contains(refs, other.ref) {
			t.Errorf("another holdfast's in-flight ingest %s is gone after a sync with another data dir; ingests: %v", other.ref, refs)
		}
		other.finish(t, d)
	})
}

// TestSyncAbortsOnlyStaleIngests: a sync aborts the ingests its own data dir
// left in an earlier run (a crash mid-import), and any holdfast ingest nobody
// has written for hours; a recent ingest of another holdfast stays.
func TestSyncAbortsOnlyStaleIngests(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		name := "e2e.local/rting/stale:1"
		writeDockerSave(t, filepath.Join(imagesDir, "app.tar"), build(t, fixture.ImageSpec{Names: []string{name}}))
		d.syncOK(t, dataDir, imagesDir)

		// The data dir names its owner in the refs of its ingests.
		b, err := os.ReadFile(filepath.Join(dataDir, "ingest-owner"))
		if err != nil {
			t.Fatalf("reading the data dir's ingest owner: %v", err)
		}
		owner := strings.TrimSpace(string(b))
		crashed := rtOpenIngest(t, d, "holdfast-"+owner+"-00000000-000000000000-1", rtIngestData("crashed"))
		crashed.w.Close()
		abandoned := rtOpenIngest(t, d, "holdfast-ffffffffffffffff-00000000-000000000000-1", rtIngestData("abandoned"))
		abandoned.age(t, d, 3*time.Hour)
		recent := rtOpenIngest(t, d, "holdfast-eeeeeeeeeeeeeeee-00000000-000000000000-1", rtIngestData("recent"))
		recent.w.Close()

		d.syncOK(t, dataDir, imagesDir)
		d.requirePinned(t, name)
		refs := d.ingests(t)
		if slices.Contains(refs, crashed.ref) {
			t.Errorf("the data dir's own ingest from an earlier run was not aborted: %v", refs)
		}
		if slices.Contains(refs, abandoned.ref) {
			t.Errorf("a holdfast ingest untouched for hours was not aborted: %v", refs)
		}
		if !slices.Contains(refs, recent.ref) {
			t.Errorf("another holdfast's recent ingest was aborted: %v", refs)
		}
	})
}

// TestOthersIngestsAndLeasesUntouched: a sync aborts only holdfast's own stale
// ingests and releases only holdfast's leases: another client's upload in
// progress and its lease stay.
func TestOthersIngestsAndLeasesUntouched(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	writeDockerSave(t, filepath.Join(imagesDir, "app.tar"), build(t, fixture.ImageSpec{Names: []string{"e2e.local/others/app:1"}}))

	lease, err := d.Client.LeasesService().Create(d.ctx(), leases.WithID("someone-else/upload"))
	if err != nil {
		t.Fatal(err)
	}
	lctx := leases.WithLease(d.ctx(), lease.ID)
	data := bytes.Repeat([]byte("partial upload "), 4096)
	ref := "someone-else-upload-1"
	cw, err := content.OpenWriter(lctx, d.Client.ContentStore(), content.WithRef(ref),
		content.WithDescriptor(ocispec.Descriptor{Digest: digest.FromBytes(data), Size: int64(len(data))}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cw.Write(data[:len(data)/2]); err != nil {
		t.Fatal(err)
	}
	cw.Close()

	d.syncOK(t, dataDir, imagesDir)
	d.syncOK(t, dataDir, imagesDir)
	d.requirePinned(t, "e2e.local/others/app:1")
	st, err := d.Client.ContentStore().Status(d.ctx(), ref)
	if err != nil {
		t.Fatalf("another client's ingest is gone after a sync: %v", err)
	}
	if st.Offset != int64(len(data)/2) {
		t.Errorf("another client's ingest is at %d bytes, want %d", st.Offset, len(data)/2)
	}
	all, err := d.Client.LeasesService().List(d.ctx())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range all {
		found = found || l.ID == lease.ID
	}
	if !found {
		t.Errorf("another client's lease %s was deleted", lease.ID)
	}
}

package e2e

import (
	"os"
	"path/filepath"
	"testing"

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
	if _, err := d.Client.ImageService().Update(d.ctx(), rec, "labels."+rtLabelPinned); err != nil {
		t.Fatalf("stripping %s from %s: %v", rtLabelPinned, name, err)
	}
	if cri, hf := d.pinnedBy(t, name); !cri || hf {
		t.Fatalf("after stripping: CRI pin %v, holdfast pin %v; want only the CRI's", cri, hf)
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

package e2e

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

const criSourceKey = "containerd.io/distribution.source.docker.io"

// criBlobLabels reads the labels of one blob.
func (d *daemon) criBlobLabels(t *testing.T, dg digest.Digest) map[string]string {
	t.Helper()
	info, err := d.Client.ContentStore().Info(d.ctx(), dg)
	if err != nil {
		t.Fatalf("reading blob %s: %v", dg, err)
	}
	return info.Labels
}

// criFixtureBlobs lists every blob of a fixture image as written by the OCI
// writer: the index, and each platform's manifest, config and layers.
func criFixtureBlobs(img *fixture.Image) map[digest.Digest]string {
	out := map[digest.Digest]string{img.Target.Digest: "index"}
	for _, m := range img.Manifests {
		out[m.Descriptor.Digest] = "manifest " + m.Platform.String()
		out[m.Config.Digest] = "config " + m.Platform.String()
		for _, l := range m.Layers {
			out[l.Digest()] = "layer " + m.Platform.String()
		}
	}
	return out
}

// TestDistributionSourceLabels: every blob of an imported image carries
// containerd.io/distribution.source.<host>=<repository>, which K3s's embedded
// registry mirror needs to serve it to other nodes; a layer two repositories
// share names both, and a blob's other labels, and a repository already in
// its label, stay. On both write paths: blobs committed by metadata only
// carry the same labels.
func TestDistributionSourceLabels(t *testing.T) {
	forEachDaemonAndPath(t, func(t *testing.T, d *daemon, wp string) {
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		dataDir := filepath.Join(dir, "data")
		shared := sharedLayer(t, 311)

		// The shared layer is in the store before the import, held by a lease
		// of the test's, with a label of someone else's and a repository
		// already in its distribution source label.
		ctx := d.ctx()
		l, err := d.Client.LeasesService().Create(ctx, leases.WithRandomID())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Client.LeasesService().Delete(d.ctx(), l) })
		var blob bytes.Buffer
		if err := shared.WriteBlob(context.Background(), &blob); err != nil {
			t.Fatal(err)
		}
		cs := d.Client.ContentStore()
		if err := content.WriteBlob(leases.WithLease(ctx, l.ID), cs, "e2e-shared-layer", bytes.NewReader(blob.Bytes()),
			ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: shared.Digest(), Size: shared.Size()}); err != nil {
			t.Fatalf("writing the shared layer: %v", err)
		}
		if _, err := cs.Update(ctx, content.Info{Digest: shared.Digest(), Labels: map[string]string{
			"io.example.keep": "yes",
			criSourceKey:      "mirror/base",
		}}, "labels.io.example.keep", "labels."+criSourceKey); err != nil {
			t.Fatalf("labelling the shared layer: %v", err)
		}

		// Two platforms (an index), both written; and another repository of
		// the same host sharing the layer, from a docker save archive.
		other := fixture.Platform{OS: "linux", Architecture: "arm64"}
		if fixture.HostPlatform().Architecture == "arm64" {
			other = fixture.Platform{OS: "linux", Architecture: "amd64"}
		}
		busybox := build(t, fixture.ImageSpec{Names: []string{"docker.io/library/busybox:1.36"},
			Platforms: []fixture.Platform{fixture.HostPlatform(), other}, SharedLayers: []*fixture.Layer{shared}})
		probe := build(t, fixture.ImageSpec{Names: []string{"docker.io/tools/probe:2"}, SharedLayers: []*fixture.Layer{shared}})
		writeArchive(t, filepath.Join(imagesDir, "busybox.tar"), fixture.None, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
			return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerd}, busybox)
		})
		writeDockerSave(t, filepath.Join(imagesDir, "probe.tar"), probe)
		_, log := d.wpSyncOK(t, wp, dataDir, imagesDir)
		wpRequirePlaced(t, wp, log, filepath.Join(imagesDir, "busybox.tar"), filepath.Join(imagesDir, "probe.tar"))

		want := func(dg digest.Digest) string {
			switch dg {
			case shared.Digest():
				return "library/busybox,mirror/base,tools/probe"
			}
			return ""
		}
		blobs := criFixtureBlobs(busybox)
		if len(blobs) < 7 {
			t.Fatalf("the busybox fixture has %d blobs; want an index, two manifests, two configs and layers", len(blobs))
		}
		for dg, what := range blobs {
			v := want(dg)
			if v == "" {
				v = "library/busybox"
			}
			if got := d.criBlobLabels(t, dg)[criSourceKey]; got != v {
				t.Errorf("busybox %s %s: %s=%q; want %q", what, dg, criSourceKey, got, v)
			}
		}
		rec, ok := d.record(t, "docker.io/tools/probe:2")
		if !ok {
			t.Fatal("no record for docker.io/tools/probe:2")
		}
		probeBlobs := d.hostBlobs(t, rec.Target)
		if len(probeBlobs) < 3 {
			t.Fatalf("probe has %d blobs; want a manifest, a config and layers", len(probeBlobs))
		}
		for _, desc := range probeBlobs {
			v := want(desc.Digest)
			if v == "" {
				v = "tools/probe"
			}
			if got := d.criBlobLabels(t, desc.Digest)[criSourceKey]; got != v {
				t.Errorf("probe %s %s: %s=%q; want %q", desc.MediaType, desc.Digest, criSourceKey, got, v)
			}
		}
		if got := d.criBlobLabels(t, shared.Digest())["io.example.keep"]; got != "yes" {
			t.Errorf("the shared layer's own label io.example.keep=%q after the import; want yes", got)
		}
		// Manifests keep the labels that let GC follow them.
		for _, m := range busybox.Manifests {
			if got := d.criBlobLabels(t, m.Descriptor.Digest); got["containerd.io/gc.ref.content.config"] != m.Config.Digest.String() {
				t.Errorf("manifest %s lost its GC reference to its config: %v", m.Descriptor.Digest, got)
			}
		}
	})
}

// criStatus is what these tests read of `status -o json`.
type criStatus struct {
	Images []struct {
		Name string `json:"name"`
		CRI  *struct {
			Seen   bool `json:"seen"`
			Pinned bool `json:"pinned"`
		} `json:"cri"`
	} `json:"images"`
	CRI struct {
		Available    bool   `json:"available"`
		PinsReported bool   `json:"pinsReported"`
		Note         string `json:"note"`
	} `json:"cri"`
}

// criStatusOf runs `status -o json` against d and reads it.
func (d *daemon) criStatusOf(t *testing.T, dataDir string, extra ...string) criStatus {
	t.Helper()
	var st criStatus
	readStatus(t, &st, append([]string{"--address", d.Address, "--data-dir", dataDir}, extra...)...)
	return st
}

// TestStatusShowsCRIView: status reports, per image, what the CRI image
// service tells the kubelet: on containerd 2.4.2 each pinned image is seen
// and pinned; on Debian's 1.6.20, whose CRI reports no pins, each is seen,
// not pinned, and status says once that heal is what protects the images.
func TestStatusShowsCRIView(t *testing.T) {
	forEachLine(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		dataDir := filepath.Join(dir, "data")
		app := build(t, fixture.ImageSpec{Names: []string{"e2e.local/cri/app:1"}})
		writeDockerSave(t, filepath.Join(imagesDir, "app.tar"), app)
		d.syncOK(t, dataDir, imagesDir)
		names := []string{"e2e.local/cri/app:1", "e2e.local/cri/app@" + app.Target.Digest.String()}
		if _, ok := d.record(t, names[1]); !ok {
			rec, _ := d.record(t, names[0])
			names[1] = "e2e.local/cri/app@" + rec.Target.Digest.String()
		}

		var st criStatus
		// The CRI learns of records from containerd's events: wait for it.
		eventually(t, "status to show the CRI seeing both names", func() bool {
			st = d.criStatusOf(t, dataDir)
			seen := 0
			for _, img := range st.Images {
				if img.CRI != nil && img.CRI.Seen {
					seen++
				}
			}
			return seen == len(names)
		})
		if !st.CRI.Available {
			t.Errorf("status: the CRI is not available: %+v", st.CRI)
		}
		byName := map[string]bool{}
		for _, img := range st.Images {
			byName[img.Name] = true
			if img.CRI == nil {
				t.Errorf("%s: no CRI view in status", img.Name)
				continue
			}
			if want := !d.Old; img.CRI.Pinned != want {
				t.Errorf("%s: the CRI reports pinned %v in status; want %v", img.Name, img.CRI.Pinned, want)
			}
			if found, pinned := d.criImage(t, img.Name); !found || pinned != img.CRI.Pinned {
				t.Errorf("%s: the CRI itself says found %v pinned %v; status says %+v", img.Name, found, pinned, *img.CRI)
			}
		}
		for _, n := range names {
			if !byName[n] {
				t.Errorf("status lacks %s: %+v", n, st.Images)
			}
		}
		table := holdfast(t, "status", "--address", d.Address, "--data-dir", dataDir)
		heal := "the kubelet cannot see pins here; holdfast's heal restores deleted images"
		if d.Old {
			if st.CRI.PinsReported || !strings.Contains(st.CRI.Note, heal) {
				t.Errorf("status on containerd 1.6.20: cri %+v; want pins not reported and a note naming heal", st.CRI)
			}
			if n := strings.Count(table.Stdout, heal); n != 1 {
				t.Errorf("the table says %d times that pins are not seen; want once\n%s", n, table.Stdout)
			}
		} else {
			if !st.CRI.PinsReported || st.CRI.Note != "" {
				t.Errorf("status on containerd 2.4.2: cri %+v; want pins reported and no note", st.CRI)
			}
			if strings.Contains(table.Stdout, heal) {
				t.Errorf("the table says pins are not seen on containerd 2.4.2\n%s", table.Stdout)
			}
		}
		want := "pinned"
		if d.Old {
			want = "seen"
		}
		if !strings.Contains(table.Stdout, "CRI") || !criTableHas(table.Stdout, names[0], want) {
			t.Errorf("the table does not show the CRI's view (%s) of %s\n%s", want, names[0], table.Stdout)
		}
	})
}

// criTableHas reports whether the status table's row for name has word as a column.
func criTableHas(table, name, word string) bool {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == name {
			for _, w := range f[1:] {
				if w == word {
					return true
				}
			}
		}
	}
	return false
}

// TestNoCRI: where there is no CRI — a namespace the CRI does not serve, or
// a containerd with its CRI plugin disabled — status says "no CRI" and gives
// no per-image view, and the agent's readiness does not wait for a CRI that
// will never see its images.
func TestNoCRI(t *testing.T) {
	for _, c := range []struct {
		name  string
		start func(*testing.T) *daemon
		ns    string
	}{
		{"other-namespace", startEmbedded, "holdfast-e2e-nocri"},
		{"cri-disabled", criStartDebianWithoutCRI, namespace},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := c.start(t)
			dir := tempDir(t)
			imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
			app := build(t, fixture.ImageSpec{Names: []string{"e2e.local/nocri/app:1"}})
			writeDockerSave(t, filepath.Join(imagesDir, "app.tar"), app)
			agent := startAgent(t, d, dataDir, []string{imagesDir}, "--namespace", c.ns)
			eventually(t, "/readyz to turn 200 without a CRI", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })
			agent.stop(t) // every line it logged has been read once it has stopped
			if n := agent.logged("no CRI image service", nil); n != 1 {
				t.Errorf("the agent said %d times that there is no CRI; want once\n%s", n, agent.dump())
			}

			st := d.criStatusOf(t, dataDir, "--namespace", c.ns)
			if len(st.Images) == 0 {
				t.Fatalf("status in %s lists no images", c.ns)
			}
			if st.CRI.Available || !strings.Contains(st.CRI.Note, "no CRI") {
				t.Errorf("status in %s: cri %+v; want not available and a note saying no CRI", c.ns, st.CRI)
			}
			for _, img := range st.Images {
				if img.CRI != nil {
					t.Errorf("%s: a CRI view %+v where there is no CRI", img.Name, *img.CRI)
				}
			}
		})
	}
}

// criStartDebianWithoutCRI starts Debian's containerd 1.6 with its CRI plugin
// disabled: it answers containerd's API, and the CRI's with Unimplemented.
func criStartDebianWithoutCRI(t *testing.T) *daemon {
	return startDebianWith(t, false)
}

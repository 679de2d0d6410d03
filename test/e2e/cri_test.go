package e2e

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
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
// its label, stay.
func TestDistributionSourceLabels(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
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
		d.syncOK(t, dataDir, imagesDir)

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

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// startRegistry runs go-containerregistry's registry on 127.0.0.1.
func startRegistry(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return srv, strings.TrimPrefix(srv.URL, "http://")
}

// push uploads a generated image to ref and returns its manifest digest there
// (go-containerregistry writes its own manifest for it).
func push(t *testing.T, ref string, img *fixture.Image) string {
	t.Helper()
	var buf bytes.Buffer
	if err := fixture.WriteGGCRTarball(context.Background(), &buf, img); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	v1img, err := tarball.Image(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }, nil)
	if err != nil {
		t.Fatalf("reading the image back: %v", err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, v1img); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	dg, err := v1img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return dg.String()
}

// TestPullList: a pull list against a registry on 127.0.0.1: good tag and
// digest references are pulled and pinned, a non-local name through a
// hosts.toml mirror too; an unknown tag and a malformed line are reported as
// file:line and stop nothing; with the registry gone, nothing is unpinned and
// a deleted image is healed from what was leased.
func TestPullList(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	srv, host := startRegistry(t)
	mk := func(n string) *fixture.Image { return build(t, fixture.ImageSpec{Names: []string{n}}) }
	app, tool, byDigest, mirrored := mk("e2e.local/pl/app:1"), mk("e2e.local/pl/tool:2"), mk("e2e.local/pl/bydigest:1"), mk("e2e.local/pl/mirrored:1")
	push(t, host+"/team/app:1", app)
	push(t, host+"/team/tool:2", tool)
	byDigestDigest := push(t, host+"/team/bydigest:1", byDigest)
	mirroredDigest := push(t, host+"/team/mirrored:1", mirrored)

	regConf := filepath.Join(dataDir, "registry.d", "mirror.example.com")
	if err := os.MkdirAll(regConf, 0o755); err != nil {
		t.Fatal(err)
	}
	hostsToml := fmt.Sprintf("server = \"http://%s\"\n\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", host, host)
	if err := os.WriteFile(filepath.Join(regConf, "hosts.toml"), []byte(hostsToml), 0o644); err != nil {
		t.Fatal(err)
	}
	appRef := host + "/team/app:1"
	toolRef := host + "/team/tool:2"
	digestRef := host + "/team/bydigest@" + byDigestDigest
	mirrorRef := "mirror.example.com/team/mirrored:1"
	// A second mirror comes from a K3s registries.yaml.
	k3sRef := "k3s-mirror.example.com/team/app:1"
	regYAML := filepath.Join(filepath.Dir(dataDir), "registries.yaml")
	if err := os.WriteFile(regYAML, []byte(fmt.Sprintf("mirrors:\n  k3s-mirror.example.com:\n    endpoint:\n      - \"http://%s\"\n", host)), 0o644); err != nil {
		t.Fatal(err)
	}
	list := strings.Join([]string{
		"# pulled by holdfast",
		appRef,
		toolRef + "   # with a comment",
		digestRef,
		host + "/team/missing:9",
		"Not A Valid Ref",
		mirrorRef,
		k3sRef,
	}, "\n") + "\n"
	listPath := filepath.Join(imagesDir, "list.txt")
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(listPath, []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	good := []string{appRef, toolRef, digestRef, mirrorRef, k3sRef}

	res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--registries-yaml", regYAML)
	if res.Code != 1 {
		t.Fatalf("sync exited %d, want 1 (two bad lines)\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	for _, want := range []string{listPath + ":5: pulling " + host + "/team/missing:9", listPath + ":6: "} {
		if !strings.Contains(res.Stderr, want) {
			t.Errorf("stderr does not report %q:\n%s", want, res.Stderr)
		}
	}
	d.requirePinned(t, good...)
	if rec, _ := d.record(t, mirrorRef); rec.Target.Digest.String() != mirroredDigest {
		t.Errorf("mirrored image has target %s, want %s", rec.Target.Digest, mirroredDigest)
	}
	if _, ok := d.leaseOf(t, listPath); !ok {
		t.Error("the pull list has no lease")
	}

	// The registry goes away; the next syncs unpin nothing and heal from the lease.
	srv.Close()
	res = d.sync(t, dataDir, imagesDir)
	c := summaryCounts(t, res.Stdout)
	if c["unpinned"] != 0 || c["released"] != 0 {
		t.Errorf("sync without the registry: %v\n%s", c, res.Stderr)
	}
	d.requirePinned(t, good...)
	// crictl rmi deletes every record of the image (the last one
	// synchronously, so GC runs): only the list's lease holds its content.
	recApp, _ := d.record(t, appRef)
	d.crictl(t, "rmi", appRef)
	if _, ok := d.record(t, appRef); ok {
		t.Fatal("crictl rmi left the record")
	}
	res = d.sync(t, dataDir, imagesDir)
	if c := summaryCounts(t, res.Stdout); c["healed"] < 1 {
		t.Errorf("not healed without the registry: %v\n%s", c, res.Stderr)
	}
	d.requirePinned(t, good...)
	lease, ok := d.leaseOf(t, listPath)
	if !ok {
		t.Fatal("the pull list's lease is gone")
	}
	held := d.leaseContent(t, lease)
	for _, ref := range good {
		rec, ok := d.record(t, ref)
		if !ok {
			t.Errorf("%s: no record", ref)
			continue
		}
		for _, b := range d.hostBlobs(t, rec.Target) {
			if !held[b.Digest] {
				t.Errorf("%s: the pull list's lease lacks %s %s", ref, b.MediaType, b.Digest)
			}
			if !d.hasBlob(t, b.Digest) {
				t.Errorf("%s: %s %s is not in the store", ref, b.MediaType, b.Digest)
			}
		}
	}
	if rec, _ := d.record(t, appRef); rec.Target.Digest != recApp.Target.Digest {
		t.Errorf("%s healed to %s, want %s", appRef, rec.Target.Digest, recApp.Target.Digest)
	}
}

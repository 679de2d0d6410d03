package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

const ownRepo = "ghcr.io/holdfast-project/holdfast"

// ownImage is holdfast's own image as `make image` makes it.
type ownImage struct {
	Path, Name, Digest string
}

// ownBuildImage runs tools/mkimage as `make image` does, into dir. The host's
// platform gets the suite's real holdfast binary; the other platform a small
// stand-in: cross-compiling holdfast in a test takes minutes, and what this
// test checks of that platform (an entry of the index holdfast leases but
// does not need complete) does not depend on its bytes.
func ownBuildImage(t *testing.T, dir string) ownImage {
	t.Helper()
	root := repoRoot()
	work := tempDir(t)
	mk := filepath.Join(work, "mkimage")
	build := exec.Command("go", "build", "-trimpath", "-o", mk, "./tools/mkimage")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building mkimage: %v\n%s", err, out)
	}
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	args := []string{"-o", filepath.Join(dir, "holdfast-image.tar"), "-repo", ownRepo, "-version", "e2e-own",
		"-revision", "0000000000000000000000000000000000000000", "-source", "https://github.com/holdfast-project/holdfast",
		"-epoch", "1764760500", "-bin", "holdfast"}
	for _, arch := range []string{runtime.GOARCH, other} {
		bins := filepath.Join(work, "linux_"+arch)
		if err := os.MkdirAll(bins, 0o755); err != nil {
			t.Fatal(err)
		}
		src := []byte("#!/bin/sh\necho holdfast stand-in for linux/" + arch + "\n")
		if arch == runtime.GOARCH {
			var err error
			if src, err = os.ReadFile(holdfastBin); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(bins, "holdfast"), src, 0o755); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-platform", "linux/"+arch+"="+bins)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(mk, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("mkimage: %v\n%s", err, out)
	}
	img := ownImage{Path: filepath.Join(dir, "holdfast-image.tar"), Name: ownRepo + ":e2e-own"}
	for line := range strings.Lines(string(out)) {
		if d, ok := strings.CutPrefix(line, "digest "); ok {
			img.Digest = strings.TrimSpace(d)
		}
	}
	if img.Digest == "" {
		t.Fatalf("mkimage printed no digest:\n%s", out)
	}
	return img
}

// ownCrictlImages lists the CRI's images with crictl.
func ownCrictlImages(t *testing.T, d *daemon) []ownCRIImage {
	t.Helper()
	bin, err := exec.LookPath("crictl")
	if err != nil {
		testenv.Missing(t, "crictl", "crictl is not on PATH (make deps installs it into bin/): "+err.Error())
	}
	ep := "unix://" + d.Address
	out, err := exec.Command(bin, "--runtime-endpoint", ep, "--image-endpoint", ep, "--timeout", "20s", "images", "-o", "json").Output()
	if err != nil {
		t.Fatalf("crictl images: %v", err)
	}
	var list struct {
		Images []ownCRIImage `json:"images"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("reading crictl images -o json: %v\n%s", err, out)
	}
	return list.Images
}

type ownCRIImage struct {
	ID       string   `json:"id"`
	RepoTags []string `json:"repoTags"`
	Pinned   bool     `json:"pinned"`
}

// TestOwnImage: holdfast's own image, as `make image` writes it, synced from
// an images dir into the embedded containerd (2.4.2): named REPO:VERSION from
// the index annotation, pinned by both labels, the host platform complete,
// shown pinned by crictl, and the same name from containerd's own importer
// (what `ctr import --local` and K3s use).
func TestOwnImage(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	img := ownBuildImage(t, imagesDir)
	d.syncOK(t, dataDir, imagesDir)
	d.requirePinned(t, img.Name)
	rec, ok := d.record(t, img.Name)
	if !ok {
		t.Fatalf("no record %s; records %v", img.Name, d.recordNames(t))
	}
	if string(rec.Target.Digest) != img.Digest || rec.Target.MediaType != ocispec.MediaTypeImageIndex {
		t.Errorf("record target %s (%s); want the index %s", rec.Target.Digest, rec.Target.MediaType, img.Digest)
	}
	blobs := d.hostBlobs(t, rec.Target)
	if len(blobs) != 4 { // index, manifest, config, layer
		t.Errorf("host platform blobs %v; want index, manifest, config and one layer", blobs)
	}
	for _, b := range blobs {
		if !d.hasBlob(t, b.Digest) {
			t.Errorf("host platform lacks %s (%s)", b.Digest, b.MediaType)
		}
	}

	var found *ownCRIImage
	eventually(t, "crictl to list "+img.Name+" pinned", func() bool {
		for _, ci := range ownCrictlImages(t, d) {
			if slices.Contains(ci.RepoTags, img.Name) {
				found = &ci
				return ci.Pinned
			}
		}
		return false
	})
	var st statusJSON
	readStatus(t, &st, "--address", d.Address, "--data-dir", dataDir)
	var listed bool
	for _, si := range st.Images {
		if si.Name == img.Name {
			listed = true
			if !si.Pinned || !si.Owned || si.ID != found.ID || si.Size <= 0 {
				t.Errorf("status of %s: %+v; want pinned, owned, id %s, a size", img.Name, si, found.ID)
			}
		}
	}
	if !listed {
		t.Errorf("status lists no %s", img.Name)
	}

	// containerd's importer names it the same (its own namespace here).
	f, err := os.Open(img.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := namespaces.WithNamespace(d.ctx(), "own-import")
	imported, err := d.Client.Import(ctx, f, containerd.WithAllPlatforms(true))
	if err != nil {
		t.Fatalf("containerd's import of %s: %v", img.Path, err)
	}
	var names []string
	for _, im := range imported {
		names = append(names, im.Name)
	}
	if !slices.Equal(names, []string{img.Name}) || string(imported[0].Target.Digest) != img.Digest {
		t.Errorf("containerd's importer: %v (%v); want %s at %s", names, imported, img.Name, img.Digest)
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// criInspect is what `crictl inspecti -o json` says of an image.
type criInspect struct {
	ID          string   `json:"id"`
	RepoTags    []string `json:"repoTags"`
	RepoDigests []string `json:"repoDigests"`
	Pinned      bool     `json:"pinned"`
}

// inspecti runs `crictl inspecti -o json name`; found is false when the CRI
// knows no such image. Any other failure fails the test.
func (d *daemon) inspecti(t *testing.T, name string) (img criInspect, found bool) {
	t.Helper()
	bin, err := exec.LookPath("crictl")
	if err != nil {
		testenv.Missing(t, "crictl", "crictl is not on PATH (make deps installs it into bin/): "+err.Error())
	}
	ep := "unix://" + d.Address
	cmd := exec.Command(bin, "--runtime-endpoint", ep, "--image-endpoint", ep, "--timeout", "20s", "inspecti", "-o", "json", name)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if strings.Contains(stderr.String(), "no such image") {
			return criInspect{}, false
		}
		t.Fatalf("crictl inspecti %s: %v\n%s%s", name, err, out, stderr.String())
	}
	var v struct {
		Status criInspect `json:"status"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("crictl inspecti %s: %v\n%s", name, err, out)
	}
	return v.Status, true
}

// writeOCIArchive writes imgs as an OCI layout tar named by
// io.containerd.image.name.
func writeOCIArchive(t *testing.T, path string, imgs ...*fixture.Image) {
	t.Helper()
	writeArchive(t, path, fixture.None, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerd}, imgs...)
	})
}

// TestRetagOfKnownContent: an archive that brings, under a new name, an image
// whose content (its very manifest) is already in the store under another
// name gives the new name records of its own, repo:tag and repo@digest, both
// pinned, so that the CRI resolves either spelling a pod may use to the
// image it already has (imagePullPolicy IfNotPresent needs no pull): same
// image ID as the first name, the new repo@digest among its repo digests.
// The first name is left as it was. Whether the content came with a holdfast
// sync (then the new name by holdfast import) or with containerd's own
// importer (then the new name by a sync).
func TestRetagOfKnownContent(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		twin := func(name string, seed int64) *fixture.Image {
			return build(t, fixture.ImageSpec{Names: []string{name}, Layers: fixture.UniformLayers(2, 64<<10, false, seed)})
		}

		// (a) example.com/a:1 by a sync; the same image as example.com/b:2
		// by holdfast import of another archive.
		a, b := twin("example.com/a:1", 1243), twin("example.com/b:2", 1243)
		// (c) example.com/c:1 by containerd's importer, unpinned; the same
		// image as example.com/d:3 by a sync.
		c, e := twin("example.com/c:1", 1244), twin("example.com/d:3", 1244)
		for _, p := range [][2]*fixture.Image{{a, b}, {c, e}} {
			if p[0].Target.Digest != p[1].Target.Digest || p[0].Target.Digest == "" {
				t.Fatalf("%v and %v should be the same manifest: %s, %s", p[0].Names, p[1].Names, p[0].Target.Digest, p[1].Target.Digest)
			}
		}
		if a.Target.Digest == c.Target.Digest {
			t.Fatal("the two cases share their image")
		}

		writeOCIArchive(t, filepath.Join(imagesDir, "a.tar"), a)
		d.syncOK(t, dataDir, imagesDir)
		d.requirePinned(t, "example.com/a:1", "example.com/a@"+a.Target.Digest.String())
		if _, ok := d.record(t, "example.com/b:2"); ok {
			t.Fatal("example.com/b:2 exists before any archive named it")
		}
		bPath := filepath.Join(dir, "drop", "b.tar")
		writeOCIArchive(t, bPath, b)
		d.keepImportOK(t, dataDir, bPath)

		keepCtrImport(t, d, c)
		if cri, hf := d.pinnedBy(t, "example.com/c:1"); cri || hf {
			t.Fatalf("containerd's importer pinned example.com/c:1 (CRI %v, holdfast %v)", cri, hf)
		}
		writeOCIArchive(t, filepath.Join(imagesDir, "d.tar"), e)
		if cnt := d.syncOK(t, dataDir, imagesDir); cnt["imported"] != 1 {
			t.Errorf("sync of d.tar: %v, want 1 imported", cnt)
		}

		for _, tc := range []struct {
			first, again string
			img          *fixture.Image
			firstPinned  bool
		}{
			{"example.com/a:1", "example.com/b:2", a, true},
			{"example.com/c:1", "example.com/d:3", e, false},
		} {
			target := tc.img.Target.Digest
			repo, _, _ := strings.Cut(tc.again, ":")
			byDigest := repo + "@" + target.String()
			wantID := tc.img.ID().String()

			// containerd's records: the new name and its repo@digest, at
			// the same target, pinned by both labels.
			for _, n := range []string{tc.again, byDigest} {
				rec, ok := d.record(t, n)
				if !ok {
					t.Errorf("no record %s; records: %v", n, d.recordNames(t))
					continue
				}
				if rec.Target.Digest != target {
					t.Errorf("%s points at %s, want %s", n, rec.Target.Digest, target)
				}
				d.requirePinned(t, n)
			}
			// The first name is as it was: pinned by holdfast if holdfast
			// brought it, untouched if containerd's importer did.
			if rec, ok := d.record(t, tc.first); !ok || rec.Target.Digest != target {
				t.Errorf("%s: record at %s (found %v), want it at %s still", tc.first, rec.Target.Digest, ok, target)
			}
			if cri, hf := d.pinnedBy(t, tc.first); cri != tc.firstPinned || hf != tc.firstPinned {
				t.Errorf("%s: CRI pin %v, holdfast pin %v; want both %v", tc.first, cri, hf, tc.firstPinned)
			}

			// The CRI resolves both spellings of the new name, and the
			// first name, to one image ID; the new repo@digest is among
			// its repo digests (what the kubelet compares).
			eventually(t, "the CRI to resolve "+tc.again+" and "+byDigest, func() bool {
				_, ok1 := d.inspecti(t, tc.again)
				_, ok2 := d.inspecti(t, byDigest)
				return ok1 && ok2
			})
			for _, n := range []string{tc.first, tc.again, byDigest} {
				got, found := d.inspecti(t, n)
				switch {
				case !found:
					t.Errorf("crictl inspecti %s: no such image", n)
					continue
				case got.ID != wantID:
					t.Errorf("crictl inspecti %s: image ID %s, want %s (%s's)", n, got.ID, wantID, tc.first)
				case !slices.Contains(got.RepoTags, tc.again) || !slices.Contains(got.RepoDigests, byDigest):
					t.Errorf("crictl inspecti %s: repo tags %v, repo digests %v; want %s and %s among them", n, got.RepoTags, got.RepoDigests, tc.again, byDigest)
				}
				// containerd 1.6.20's CRI never reports pins (the labels
				// are checked above with containerd's client).
				if !d.Old && !got.Pinned {
					t.Errorf("crictl inspecti %s: not pinned", n)
				}
			}
		}
	})
}

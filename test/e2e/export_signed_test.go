package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/platforms"

	"github.com/holdfast-project/holdfast/internal/signature/layout"
)

// TestExportSignedSameWhicheverImporter: one signed archive (the image's
// cosign .sig manifest carried beside it) is imported into two fresh
// stores of the same containerd, one by holdfast import and one by
// containerd's own importer; holdfast export of the signed image from each
// gives the same bytes, and containerd's importer takes the export of the
// store holdfast imported into into a third store with every record whole:
// the signature's record included, its config with it.
func TestExportSignedSameWhicheverImporter(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	scene := writeSignedScene(t, tempDir(t))
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		byHoldfast, byContainerd, third := d, sameLine(t, d), sameLine(t, d)
		if res := holdfast(t, "import", "--address", byHoldfast.Address, "--data-dir", filepath.Join(tempDir(t), "data"), scene.archive); res.Code != 0 {
			t.Fatalf("holdfast import exited %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
		}
		containerdImport(t, byContainerd, scene.archive)

		var sums []string
		var exported string
		for _, from := range []*daemon{byHoldfast, byContainerd} {
			out := filepath.Join(tempDir(t), "signed.tar.zst")
			res := holdfast(t, "export", "--address", from.Address, "--data-dir", filepath.Join(tempDir(t), "data"), scene.signed, "-o", out)
			if res.Code != 0 || !strings.Contains(res.Stderr, "exported 1 image (1 name), 1 signature, ") {
				t.Fatalf("export from the store %s imported into exited %d; want 1 image and its signature\n%s\n%s", importerOf(from, byHoldfast), res.Code, res.Stdout, res.Stderr)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(b)
			sums = append(sums, hex.EncodeToString(sum[:]))
			if from == byHoldfast {
				exported = out
			}
		}
		if sums[0] != sums[1] {
			t.Errorf("the export of %s is sha256:%s from the store holdfast imported into, sha256:%s from the one containerd imported into", scene.signed, sums[0], sums[1])
		}

		containerdImport(t, third, exported)
		rec, ok := third.record(t, scene.signed)
		if !ok {
			t.Fatalf("containerd's import of the export made no record %s", scene.signed)
		}
		sigTag := strings.TrimSuffix(scene.signed, ":1") + ":" + layout.SigTag(rec.Target.Digest)
		if _, ok := third.record(t, sigTag); !ok {
			t.Errorf("containerd's import of the export made no record %s", sigTag)
		}
		cs := third.Client.ContentStore()
		for _, n := range third.recordNames(t) {
			rec, _ := third.record(t, n)
			available, _, present, missing, err := images.Check(third.ctx(), cs, rec.Target, platforms.Default())
			if err != nil || !available || len(missing) > 0 {
				t.Errorf("record %s from the export is incomplete (%d/%d): missing %v, err %v", n, len(present), len(present)+len(missing), missing, err)
			}
		}
	})
}

// sameLine starts another fresh containerd of d's build.
func sameLine(t *testing.T, d *daemon) *daemon {
	t.Helper()
	if d.Old {
		return startDebian(t)
	}
	return startEmbedded(t)
}

// containerdImport imports the archive at path with containerd's own
// importer: ctr images import (the transfer service) where the daemon has
// it, else the client's import (ctr images import --local), which Debian's
// 1.6 needs.
func containerdImport(t *testing.T, d *daemon, path string) {
	t.Helper()
	if !d.Old {
		d.ctr(t, "-n", namespace, "images", "import", path)
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(path, ".zst") {
		b = decodeZstd(t, b)
	}
	if _, err := d.Client.Import(d.ctx(), bytes.NewReader(b), containerd.WithAllPlatforms(false)); err != nil {
		t.Fatalf("containerd's client import of %s: %v", path, err)
	}
}

func importerOf(d, byHoldfast *daemon) string {
	if d == byHoldfast {
		return "holdfast"
	}
	return "containerd"
}

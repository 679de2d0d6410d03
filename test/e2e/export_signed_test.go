package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
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
		sigTag := strings.TrimSuffix(scene.signed, ":1") + ":" + oci.SignatureTag(rec.Target.Digest)
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

// TestExportSignedKeptBeforeConfigs: a source imported from an images dir
// as a holdfast that kept no signature configs left it (its state lists
// none of its signatures' blobs, the config is not in the store): holdfast
// export of its image fails, naming the image, the signature manifest and
// the config, and writes nothing; the next sync imports the source again,
// which keeps the config, and the export then succeeds, whole. The config
// removed again (ctr content rm), the next sync restores it.
func TestExportSignedKeptBeforeConfigs(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		imagesDir, dataDir := filepath.Join(tempDir(t), "images"), filepath.Join(tempDir(t), "data")
		scene := writeSignedScene(t, imagesDir)
		if res := d.sync(t, dataDir, imagesDir); res.Code != 0 {
			t.Fatalf("sync exited %d\n%s", res.Code, res.Stderr)
		}
		l, ok := d.leaseOf(t, scene.archive)
		if !ok {
			t.Fatalf("no lease of %s", scene.archive)
		}
		rec, ok := d.record(t, scene.signed)
		if !ok {
			t.Fatalf("sync made no record %s", scene.signed)
		}
		sigs, config := d.unlistSignatureBlobs(t, l.ID, rec.Target.Digest)
		if err := d.Client.ContentStore().Delete(d.ctx(), config); err != nil && !errdefs.IsNotFound(err) {
			t.Fatal(err)
		}

		outDir := filepath.Join(tempDir(t), "out")
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(outDir, "signed.tar.zst")
		res := holdfast(t, "export", "--address", d.Address, "--data-dir", dataDir, scene.signed, "-o", out)
		if res.Code != 1 {
			t.Errorf("export of a signed image without its signature's config exited %d; want 1\n%s", res.Code, res.Stderr)
		}
		for _, want := range append([]string{scene.signed, config.String(), "is not in the store"}, sigs...) {
			if !strings.Contains(res.Stderr, want) {
				t.Errorf("export of a signed image without its signature's config does not say %q\n%s", want, res.Stderr)
			}
		}
		if entries, _ := os.ReadDir(outDir); len(entries) != 0 {
			t.Errorf("a failed export left %d entries", len(entries))
		}

		res = d.sync(t, dataDir, imagesDir)
		if res.Code != 0 || !strings.Contains(res.Stdout, "1 imported") {
			t.Fatalf("sync after the upgrade exited %d; want the source imported again\n%s\n%s", res.Code, res.Stdout, res.Stderr)
		}
		if !d.leaseContent(t, l)[config] {
			t.Errorf("the import again left the signature config %s off the lease %s", config, l.ID)
		}
		if res := holdfast(t, "export", "--address", d.Address, "--data-dir", dataDir, scene.signed, "-o", out); res.Code != 0 {
			t.Fatalf("export after the import again exited %d\n%s", res.Code, res.Stderr)
		}
		// The config is among the blobs the source needs now: removed, the
		// source is not intact, and the next sync imports it again.
		if err := d.Client.ContentStore().Delete(d.ctx(), config); err != nil {
			t.Fatal(err)
		}
		if res := d.sync(t, dataDir, imagesDir); res.Code != 0 || !strings.Contains(res.Stdout, "1 imported") {
			t.Errorf("sync after the signature config was removed exited %d; want the source imported again\n%s\n%s", res.Code, res.Stdout, res.Stderr)
		}
		if _, err := d.Client.ContentStore().Info(d.ctx(), config); err != nil {
			t.Errorf("the signature config %s after the sync: %v", config, err)
		}
		third := sameLine(t, d)
		containerdImport(t, third, out)
		for _, n := range third.recordNames(t) {
			rec, _ := third.record(t, n)
			if ok, _, _, missing, err := images.Check(third.ctx(), third.Client.ContentStore(), rec.Target, platforms.Default()); err != nil || !ok || len(missing) > 0 {
				t.Errorf("record %s from the export: available %v, missing %v, err %v", n, ok, missing, err)
			}
		}
	})
}

// unlistSignatureBlobs writes the state of lease as a holdfast that kept a
// signature manifest without its config wrote it: its blobs list none of
// its signatures' blobs. It returns the digests of the signature manifests
// of image and the config of the first.
func (d *daemon) unlistSignatureBlobs(t *testing.T, lease string, image digest.Digest) ([]string, digest.Digest) {
	t.Helper()
	ctx := d.ctx()
	cs := d.Client.ContentStore()
	raw := d.newestState(t, lease)
	var st struct {
		Blobs      []digest.Digest                        `json:"blobs"`
		Signatures map[digest.Digest][]ocispec.Descriptor `json:"signatures"`
	}
	var whole map[string]any
	if err := errors.Join(json.Unmarshal(raw, &st), json.Unmarshal(raw, &whole)); err != nil {
		t.Fatal(err)
	}
	var sigs []string
	var sigBlobs []digest.Digest
	var config digest.Digest
	for target, ds := range st.Signatures {
		for _, desc := range ds {
			mraw, err := content.ReadBlob(ctx, cs, desc)
			if err != nil {
				t.Fatalf("reading signature manifest %s: %v", desc.Digest, err)
			}
			var m ocispec.Manifest
			if err := json.Unmarshal(mraw, &m); err != nil {
				t.Fatal(err)
			}
			if target == image {
				if config == "" {
					config = m.Config.Digest
				}
				sigs = append(sigs, desc.Digest.String())
			}
			sigBlobs = append(sigBlobs, desc.Digest, m.Config.Digest)
			for _, l := range m.Layers {
				sigBlobs = append(sigBlobs, l.Digest)
			}
		}
	}
	if config == "" {
		t.Fatalf("the state of %s lists no signature of %s: %s", lease, image, raw)
	}
	whole["blobs"] = slices.DeleteFunc(st.Blobs, func(b digest.Digest) bool { return slices.Contains(sigBlobs, b) })
	d.writeState(t, lease, "e2e-unlisted-state-", whole)
	return sigs, config
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// bundleSet is a bundle of each kind and the images it holds, by the name
// the kubelet asks for.
type bundleSet struct {
	haul, haulContainerd, zarf, cosignDir string
	images                                map[string]digest.Digest // every image name the bundles bring → its target
	cosignName                            string
	cosignTarget                          digest.Digest
}

// writeBundles writes, into dir, a signed Hauler haul with a chart and a
// file, a legacy one saved for containerd, a Zarf package with signatures
// and a chart, and a cosign layout, each holding images of its own.
func writeBundles(t *testing.T, dir, prefix string) bundleSet {
	t.Helper()
	img := func(name string, multi bool) *fixture.Image {
		spec := fixture.ImageSpec{Names: []string{name}, Labels: map[string]string{"name": name}}
		if multi {
			spec.Platforms = []fixture.Platform{fixture.HostPlatform(), {OS: "linux", Architecture: "s390x"}}
		}
		return build(t, spec)
	}
	hub := img(prefix+"hub", false) // a Docker Hub name: the haul spells it index.docker.io/…
	multi := img("e2e.local/bundles/"+prefix+"multi:1", true)
	old := img("e2e.local/bundles/"+prefix+"old:1", false)
	zapp := img("e2e.local/bundles/"+prefix+"zarf:1", false)
	zmulti := img("e2e.local/bundles/"+prefix+"zarfmulti:1", true)
	signed := img("e2e.local/bundles/"+prefix+"signed:1", false)
	s := bundleSet{
		haul:           filepath.Join(dir, "haul.tar.zst"),
		haulContainerd: filepath.Join(dir, "old-haul.tar.zst"),
		zarf:           filepath.Join(dir, "zarf-package-"+prefix+"demo-amd64.tar.zst"),
		cosignDir:      filepath.Join(dir, "..", "cosign-"+prefix+"layout"),
		cosignName:     "e2e.local/bundles/" + prefix + "signed:1",
		cosignTarget:   signed.Target.Digest,
		images: map[string]digest.Digest{
			"docker.io/library/" + prefix + "hub:latest": hub.Target.Digest,
			"e2e.local/bundles/" + prefix + "multi:1":    multi.Target.Digest,
			"e2e.local/bundles/" + prefix + "old:1":      old.Target.Digest,
			"e2e.local/bundles/" + prefix + "zarf:1":     zapp.Target.Digest,
		},
	}
	writeArchive(t, s.haul, fixture.Zstd, fixture.CompressOptions{ZstdWindow: 8 << 20}, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteHaul(ctx, w, fixture.HaulOptions{Signatures: true, Referrers: true, StoreJSON: true,
			Charts: []fixture.HaulChart{{Name: "podinfo", Version: "6.5.0"}}, Files: []fixture.HaulFile{{Path: "/opt/install.sh", Data: []byte("#!/bin/sh\n")}}}, hub, multi)
	})
	writeArchive(t, s.haulContainerd, fixture.Zstd, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteHaul(ctx, w, fixture.HaulOptions{Containerd: true, LegacyKinds: true, Signatures: true, SignaturesFirst: true}, old)
	})
	writeArchive(t, s.zarf, fixture.Zstd, fixture.CompressOptions{}, func(ctx context.Context, w io.Writer) error {
		return fixture.WriteZarf(ctx, w, fixture.ZarfOptions{Signatures: true, HelmChart: "ghcr.io/stefanprodan/charts/podinfo:6.5.0"}, zapp, zmulti)
	})
	// Zarf packages a multi-platform image as its host manifest.
	s.images["e2e.local/bundles/"+prefix+"zarfmulti:1"] = zmulti.ManifestFor(fixture.HostPlatform()).Descriptor.Digest
	if err := fixture.WriteCosignDir(context.Background(), s.cosignDir, signed, true); err != nil {
		t.Fatal(err)
	}
	return s
}

// requireBundleRecords checks that the names the bundles bring are pinned,
// in containerd and as the CRI (crictl inspecti) sees them, and that no
// record points at anything but an image (a signature, a chart, a file).
func (d *daemon) requireBundleRecords(t *testing.T, s bundleSet) {
	t.Helper()
	targets := map[digest.Digest]bool{}
	for name, target := range s.images {
		targets[target] = true
		rec, ok := d.record(t, name)
		if !ok || rec.Target.Digest != target {
			t.Errorf("%s: record %v (found %v), want it at %s", name, rec.Target.Digest, ok, target)
			continue
		}
		d.requirePinned(t, name)
		if d.Old {
			continue // containerd 1.6.20's CRI does not report pins
		}
		if pinned := d.inspectiPinned(t, name); !pinned {
			t.Errorf("crictl inspecti %s: not pinned", name)
		}
	}
	// Every record holdfast pinned is one of the bundles' images, under its
	// name or its repo@digest name, or a record that names an image's
	// signatures for the peers (<repo>:sha256-<hex>.sig, the referrers tag
	// <repo>:sha256-<hex>) in one of its repositories: none is a chart, a
	// file, an attestation or a signature under another name.
	signatureRecords := map[string]bool{}
	for name, target := range s.images {
		repo := oci.Repository(name)
		signatureRecords[repo+":"+oci.ReferrersTag(target)] = true
		signatureRecords[repo+":"+oci.SignatureTag(target)] = true
	}
	all, err := d.Client.ImageService().List(d.ctx())
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range all {
		if rec.Labels["io.holdfast.pinned"] == "" || signatureRecords[rec.Name] {
			continue
		}
		if _, ok := s.images[rec.Name]; !ok && !(strings.Contains(rec.Name, "@") && targets[rec.Target.Digest]) {
			t.Errorf("holdfast pinned %s (at %s), which is none of the bundles' images", rec.Name, rec.Target.Digest)
		}
	}
}

// inspectiPinned is what `crictl inspecti` says of name's pin.
func (d *daemon) inspectiPinned(t *testing.T, name string) bool {
	t.Helper()
	bin, err := exec.LookPath("crictl")
	if err != nil {
		testenv.Missing(t, "crictl", "crictl is not on PATH (make deps installs it into bin/): "+err.Error())
	}
	ep := "unix://" + d.Address
	out, err := exec.Command(bin, "--runtime-endpoint", ep, "--image-endpoint", ep, "--timeout", "20s", "inspecti", "-o", "json", name).Output()
	if err != nil {
		t.Fatalf("crictl inspecti %s: %v\n%s", name, err, out)
	}
	var v struct {
		Status struct {
			Pinned bool `json:"pinned"`
		} `json:"status"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("crictl inspecti %s: %v\n%s", name, err, out)
	}
	return v.Status.Pinned
}

// TestBundlesSync: a signed haul, a legacy haul saved for containerd and
// split into parts, and a Zarf package split into parts, in an images dir,
// and a cosign layout given to holdfast import --name, each bring every image
// under the right name, pinned and leased, and nothing else; status says what
// each bundle is and what it skipped; deleting a bundle unpins its images. On
// every line, with each write path.
func TestBundlesSync(t *testing.T) {
	forEachLineAndPath(t, func(t *testing.T, d *daemon, wp string) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		s := writeBundles(t, imagesDir, d.Name+"-")
		split(t, s.haulContainerd, fixture.SplitHauler)
		split(t, s.zarf, fixture.SplitZarf)
		if res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, wpFlag(wp)); res.Code != 0 {
			t.Fatalf("sync exited %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
		}
		if res := holdfast(t, "import", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, wpFlag(wp), s.cosignDir); res.Code != 1 ||
			!strings.Contains(res.Stderr, "--name") {
			t.Errorf("import of a cosign layout without --name: exit %d, want 1 and a word on --name\n%s", res.Code, res.Stderr)
		}
		res := holdfast(t, "import", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, wpFlag(wp), "--name", s.cosignName, s.cosignDir)
		if res.Code != 0 {
			t.Fatalf("import --name exited %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
		}
		s.images[s.cosignName] = s.cosignTarget
		d.requireBundleRecords(t, s)
		for _, path := range []string{s.haul, s.haulContainerd, s.zarf} {
			if _, ok := d.leaseOf(t, path); !ok {
				t.Errorf("no lease for %s", path)
			}
		}

		var st struct {
			Sources []struct {
				Path    string         `json:"path"`
				Format  string         `json:"format"`
				Skipped map[string]int `json:"skipped"`
			} `json:"sources"`
			Images []statusImage `json:"images"`
		}
		readStatus(t, &st, "--address", d.Address, "--data-dir", dataDir)
		want := map[string]string{
			s.haul:           "hauler-haul map[attestation:2 chart:1 file:1 referrer:2 signature:2]",
			s.haulContainerd: "hauler-haul map[attestation:1 signature:1]",
			s.zarf:           "zarf-package map[attestation:2 chart:1 signature:2]",
			s.cosignDir:      "cosign-layout map[attestation:1 signature:1]",
		}
		for _, src := range st.Sources {
			if w, ok := want[src.Path]; ok {
				if got := fmt.Sprintf("%s %v", src.Format, src.Skipped); got != w {
					t.Errorf("status of %s: %s, want %s", src.Path, got, w)
				}
				delete(want, src.Path)
			}
		}
		if len(want) > 0 {
			t.Errorf("status lists no source for %v", want)
		}
		hub := "docker.io/library/" + d.Name + "-hub:latest"
		if i := slices.IndexFunc(st.Images, func(i statusImage) bool { return i.Name == hub }); i < 0 ||
			!slices.Equal(st.Images[i].RecordedAs, []string{"index.docker.io/library/" + d.Name + "-hub:latest"}) {
			t.Errorf("status does not show %s as the haul spells it: %+v", hub, st.Images)
		}

		// The split haul loses a part, the whole haul goes.
		if err := os.Remove(s.haul); err != nil {
			t.Fatal(err)
		}
		if res := holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, wpFlag(wp)); res.Code != 0 {
			t.Fatalf("sync after the haul went exited %d\n%s", res.Code, res.Stderr)
		}
		if _, hf := d.pinnedBy(t, hub); hf {
			t.Errorf("%s still pinned by holdfast after its haul was deleted", hub)
		}
		d.requirePinned(t, "e2e.local/bundles/"+d.Name+"-zarf:1", s.cosignName)

		// A part of the split haul goes: the haul goes.
		if err := os.Remove(s.haulContainerd + ".002"); err != nil {
			t.Fatal(err)
		}
		res = holdfast(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, wpFlag(wp))
		if res.Code != 1 || !strings.Contains(res.Stderr, "old-haul.tar.zst.002") {
			t.Errorf("sync after a part of the split haul went: exit %d, want 1 and an error naming the part\n%s", res.Code, res.Stderr)
		}
		if _, hf := d.pinnedBy(t, "e2e.local/bundles/"+d.Name+"-old:1"); hf {
			t.Error("the split haul's image is still pinned by holdfast after one of its parts went")
		}
		if _, ok := d.leaseOf(t, s.haulContainerd); ok {
			t.Error("the split haul's lease is still there after one of its parts went")
		}
		d.requirePinned(t, "e2e.local/bundles/"+d.Name+"-zarf:1", s.cosignName)
	})
}

// statusImage is what the bundle tests read of an image in status -o json.
type statusImage struct {
	Name       string   `json:"name"`
	RecordedAs []string `json:"recordedAs"`
}

// split cuts the bundle at path into parts with splitter, small enough to
// make several, and keeps the parts' mtimes old (settled).
func split(t *testing.T, path string, splitter func(string, int64) ([]string, error)) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := splitter(path, fi.Size()/3+1)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 3 {
		t.Fatalf("%s split into %d parts, want at least 3", path, len(parts))
	}
	old := time.Now().Add(-time.Hour)
	for _, p := range parts {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBundlesUnderRun: with holdfast run up, a haul renamed into the images
// dir is imported and its images pinned, and unpinned once it is deleted; a
// Zarf package split into parts and dropped into the spool dir is imported as
// a kept source and its parts removed, and its images stay pinned.
func TestBundlesUnderRun(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir, spoolDir, staging := filepath.Join(dir, "images"), filepath.Join(dir, "data"), filepath.Join(dir, "spool"), filepath.Join(dir, "staging")
		for _, p := range []string{imagesDir, spoolDir} {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		s := writeBundles(t, staging, d.Name+"-run-")
		agent := startAgent(t, d, dataDir, []string{imagesDir}, "--spool", spoolDir)
		eventually(t, "ready", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })

		hub, multi := "docker.io/library/"+d.Name+"-run-hub:latest", "e2e.local/bundles/"+d.Name+"-run-multi:1"
		haul := filepath.Join(imagesDir, "haul.tar.zst")
		if err := os.Rename(s.haul, haul); err != nil {
			t.Fatal(err)
		}
		d.waitPinned(t, hub, multi)
		if err := os.Remove(haul); err != nil {
			t.Fatal(err)
		}
		eventually(t, hub+" unpinned", func() bool { _, hf := d.pinnedBy(t, hub); return !hf })

		split(t, s.zarf, fixture.SplitZarf)
		parts, err := filepath.Glob(s.zarf + ".part*")
		if err != nil || len(parts) == 0 {
			t.Fatalf("parts of %s: %v %v", s.zarf, parts, err)
		}
		for _, p := range parts { // part000 last: the set is whole only then
			if strings.HasSuffix(p, ".part000") {
				continue
			}
			if err := os.Rename(p, filepath.Join(spoolDir, filepath.Base(p))); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Rename(s.zarf+".part000", filepath.Join(spoolDir, filepath.Base(s.zarf)+".part000")); err != nil {
			t.Fatal(err)
		}
		zapp := "e2e.local/bundles/" + d.Name + "-run-zarf:1"
		d.waitPinned(t, zapp)
		eventually(t, "the parts removed from the spool dir", func() bool {
			left, _ := filepath.Glob(filepath.Join(spoolDir, "*"))
			return len(left) == 0
		})
		if _, ok := d.keepLeaseOf(t, filepath.Join(spoolDir, filepath.Base(s.zarf))); !ok {
			t.Error("no kept lease for the spooled Zarf package")
		}
		d.requirePinned(t, zapp)
	})
}

// TestBundlesRefused: a Zarf package whose checksums do not hold or whose
// zarf.yaml names an image it lacks, a haul of nothing but a chart, a split
// haul missing a middle part and a split Zarf package whose bytes differ from
// its part000: each fails with an error naming the bundle and the cause, and
// leaves nothing in containerd (no lease, no record, no ingest); the good haul
// beside them is imported.
func TestBundlesRefused(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir, dataDir := filepath.Join(dir, "images"), filepath.Join(dir, "data")
		img := func(name string) *fixture.Image {
			return build(t, fixture.ImageSpec{Names: []string{"e2e.local/refused/" + d.Name + "-" + name + ":1"}, Labels: map[string]string{"n": name}})
		}
		good := img("good")
		write := func(name string, f func(context.Context, io.Writer) error) string {
			p := filepath.Join(imagesDir, name)
			writeArchive(t, p, fixture.Zstd, fixture.CompressOptions{}, f)
			return p
		}
		write("good-haul.tar.zst", func(ctx context.Context, w io.Writer) error {
			return fixture.WriteHaul(ctx, w, fixture.HaulOptions{Signatures: true}, good)
		})
		type bad struct {
			path, cause string
			names       []string
		}
		corrupt, missing, charts, gap, sum := img("corrupt"), img("missing"), img("charts"), img("gap"), img("sum")
		bads := []bad{
			{write("zarf-package-corrupt-amd64.tar.zst", func(ctx context.Context, w io.Writer) error {
				return fixture.WriteZarf(ctx, w, fixture.ZarfOptions{CorruptFile: "images/index.json"}, corrupt)
			}), "images/index.json has sha256", corrupt.Names},
			{write("zarf-package-missing-amd64.tar.zst", func(ctx context.Context, w io.Writer) error {
				return fixture.WriteZarf(ctx, w, fixture.ZarfOptions{MissingImage: "e2e.local/refused/absent:1"}, missing)
			}), "zarf.yaml names e2e.local/refused/absent:1", missing.Names},
			{write("charts-haul.tar.zst", func(ctx context.Context, w io.Writer) error {
				return fixture.WriteHaul(ctx, w, fixture.HaulOptions{Charts: []fixture.HaulChart{{Name: "podinfo", Version: "6.5.0"}}})
			}), "only 1 chart", charts.Names},
		}
		gapHaul := write("gap-haul.tar.zst", func(ctx context.Context, w io.Writer) error {
			return fixture.WriteHaul(ctx, w, fixture.HaulOptions{}, gap)
		})
		split(t, gapHaul, fixture.SplitHauler)
		if err := os.Remove(gapHaul + ".002"); err != nil {
			t.Fatal(err)
		}
		bads = append(bads, bad{gapHaul, "gap-haul.tar.zst.002", gap.Names})
		sumZarf := write("zarf-package-sum-amd64.tar.zst", func(ctx context.Context, w io.Writer) error {
			return fixture.WriteZarf(ctx, w, fixture.ZarfOptions{}, sum)
		})
		split(t, sumZarf, fixture.SplitZarf)
		wrongSum(t, sumZarf+".part000")
		bads = append(bads, bad{sumZarf, "its parts join to sha256", sum.Names})

		res := d.sync(t, dataDir, imagesDir)
		if res.Code != 1 {
			t.Fatalf("sync exited %d, want 1\n%s\n%s", res.Code, res.Stdout, res.Stderr)
		}
		for _, b := range bads {
			var lines []string
			for _, l := range strings.Split(res.Stderr, "\n") {
				if strings.Contains(l, b.path+":") {
					lines = append(lines, l)
				}
			}
			if len(lines) != 1 || !strings.Contains(lines[0], b.cause) {
				t.Errorf("%s: error lines %q, want one saying %q\n%s", filepath.Base(b.path), lines, b.cause, res.Stderr)
			}
			if _, ok := d.leaseOf(t, b.path); ok {
				t.Errorf("%s: a lease was left", b.path)
			}
			for _, n := range b.names {
				if _, ok := d.record(t, n); ok {
					t.Errorf("%s: record %s was made", b.path, n)
				}
			}
		}
		d.requirePinned(t, good.Names[0])
		if refs := d.ingests(t); len(refs) != 0 {
			t.Errorf("ingests left: %v", refs)
		}
		if n := len(d.holdfastLeases(t)); n != 1 {
			t.Errorf("%d holdfast leases, want 1 (the good haul's)", n)
		}
	})
}

// wrongSum rewrites a Zarf part000 with another Sha256Sum, keeping its mtime.
func wrongSum(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var meta fixture.ZarfSplitMetadata
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatal(err)
	}
	meta.Sha256Sum = strings.Repeat("0", 64)
	if b, err = json.Marshal(meta); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// Labels and names of holdfast's contract with containerd, spelled out here
// as a user of the store sees them (internal/runtime keeps the same).
const (
	invCRIPinned = "io.cri-containerd.pinned"
	invPinned    = "io.holdfast.pinned"
	invPriorPin  = "io.holdfast.prior-pin"
	invSource    = "io.holdfast.source"
	invKept      = "io.holdfast.kept"
	invState     = "io.holdfast.state"
	invRefPrefix = "holdfast-"
)

// invCheck checks holdfast's invariants on d after a pass has finished, and
// returns every violation found (nil: none). sources maps each source file
// the test left in dirs to the images it holds: what the store must hold is
// computed from those fixtures alone, never from holdfast's own output.
//
//   - every wanted name has a record carrying both pin labels, and so has its
//     repo@digest name (same target); its target's config is the fixture's, its host-platform content is complete, and the
//     lease of the source that wants it holds every blob of it;
//   - no record carries one pin label without the other, unless it is a
//     prior pin (io.holdfast.prior-pin: the CRI label was a user's first);
//   - no record holdfast owns is unwanted (an unpin left undone);
//   - every holdfast/ lease is accounted for: its source is a file in dirs
//     (one lease per source, with its state blob), or it is a kept source's,
//     a pull's temporary lease or a content-root probe's (invProbeLeases);
//   - no holdfast ingest is left in the content store;
//   - every entry of the data dir's state cache (<data-dir>/state) that a
//     pass would use (the store names it as the state of a lease that exists)
//     is of a lease that holds all the blobs the state lists, present in the
//     store.
func invCheck(t *testing.T, d *daemon, dataDir string, dirs []string, sources map[string][]*fixture.Image) []string {
	t.Helper()
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	ctx := d.ctx()
	cs := d.Client.ContentStore()

	// The files in the images dirs are the test's sources, no more, no less.
	files := map[string]bool{}
	for _, dir := range dirs {
		_ = filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
			if err == nil && e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
				files[path] = true
			}
			return nil
		})
	}
	for path := range sources {
		if !files[path] {
			t.Fatalf("invariants: the test lists %s as a source, but it is not in the images dirs", path)
		}
	}
	for path := range files {
		if _, ok := sources[path]; !ok {
			t.Fatalf("invariants: %s is in the images dirs, but the test does not list it", path)
		}
	}

	// Leases: one per source file, or a kept source's.
	leaseList := d.holdfastLeases(t)
	bySource := map[string][]leases.Lease{}
	for _, l := range leaseList {
		src := l.Labels[invSource]
		switch {
		case l.Labels[invKept] != "":
		case strings.HasPrefix(l.ID, "holdfast/tmp-") && l.Labels["containerd.io/gc.expire"] != "":
			// a pull's temporary lease: it expires by itself
		case src == "" || !files[src]:
			fail("lease %s: its source %q is not in the images dirs", l.ID, src)
		default:
			bySource[src] = append(bySource[src], l)
		}
	}
	states := map[string]digest.Digest{}
	err := cs.Walk(ctx, func(info content.Info) error {
		states[info.Labels[invState]] = info.Digest
		return nil
	}, fmt.Sprintf(`labels.%q`, invState))
	if err != nil {
		t.Fatalf("invariants: listing state blobs: %v", err)
	}

	// What the sources want.
	wanted := map[string]bool{}
	for path, imgs := range sources {
		ls := bySource[path]
		if len(ls) != 1 {
			var ids []string
			for _, l := range ls {
				ids = append(ids, l.ID)
			}
			fail("source %s has %d leases %v, want 1", path, len(ls), ids)
			if len(ls) == 0 {
				continue
			}
		}
		lease := ls[0]
		if _, ok := states[lease.ID]; !ok {
			fail("lease %s of %s has no state blob: its import never finished", lease.ID, path)
		}
		held, err := invLeaseContent(ctx, d, lease)
		if err != nil {
			fail("lease %s of %s: %v", lease.ID, path, err)
			continue
		}
		for _, img := range imgs {
			for _, name := range img.Names {
				wanted[name] = true
				rec, ok := d.record(t, name)
				if !ok {
					fail("wanted %s (from %s): no record", name, path)
					continue
				}
				if rec.Labels[invCRIPinned] != "pinned" || rec.Labels[invPinned] != "pinned" {
					fail("wanted %s: labels %s=%q %s=%q, want both pinned", name, invCRIPinned, rec.Labels[invCRIPinned], invPinned, rec.Labels[invPinned])
				}
				available, _, _, missing, err := images.Check(ctx, cs, rec.Target, platforms.Default())
				if err != nil || !available || len(missing) > 0 {
					fail("wanted %s: host content incomplete: available %v, %d missing, err %v", name, available, len(missing), err)
					continue
				}
				m, err := images.Manifest(ctx, cs, rec.Target, platforms.Default())
				if err != nil {
					fail("wanted %s: reading its manifest: %v", name, err)
					continue
				}
				if m.Config.Digest != img.ID() {
					fail("wanted %s: config %s, the archive's is %s", name, m.Config.Digest, img.ID())
				}
				// and its repo@digest name, with the same target.
				dn := invDigestName(name, rec.Target.Digest)
				wanted[dn] = true
				if drec, ok := d.record(t, dn); !ok {
					fail("wanted %s (for %s): no record", dn, name)
				} else if drec.Target.Digest != rec.Target.Digest || drec.Labels[invCRIPinned] != "pinned" || drec.Labels[invPinned] != "pinned" {
					fail("wanted %s (for %s): target %s, labels %v", dn, name, drec.Target.Digest, drec.Labels)
				}
				blobs, err := invHostBlobs(ctx, d, rec.Target)
				if err != nil {
					fail("wanted %s: %v", name, err)
				}
				for _, b := range blobs {
					if !held[b.Digest] {
						fail("wanted %s: blob %s (%s) is not held by lease %s of %s", name, b.Digest, b.MediaType, lease.ID, path)
					}
					if err := invReadable(ctx, cs, b); err != nil {
						fail("wanted %s: blob %s (%s): %v", name, b.Digest, b.MediaType, err)
					}
				}
			}
		}
	}

	// Records: both labels or neither; holdfast owns only what is wanted.
	recs, err := d.Client.ImageService().List(ctx)
	if err != nil {
		t.Fatalf("invariants: listing records: %v", err)
	}
	for _, rec := range recs {
		if strings.HasPrefix(rec.Name, "sha256:") {
			continue // the CRI's own records
		}
		cri, own := rec.Labels[invCRIPinned] == "pinned", rec.Labels[invPinned] == "pinned"
		if own && !cri {
			fail("record %s: %s without %s", rec.Name, invPinned, invCRIPinned)
		}
		if cri && !own && rec.Labels[invPriorPin] == "" {
			fail("record %s: %s without %s and no %s", rec.Name, invCRIPinned, invPinned, invPriorPin)
		}
		if own && !wanted[rec.Name] && !invKeptName(leaseList, rec.Name) {
			fail("record %s: pinned by holdfast, but no source wants it", rec.Name)
		}
	}

	// Ingests.
	sts, err := cs.ListStatuses(ctx)
	if err != nil {
		t.Fatalf("invariants: listing ingests: %v", err)
	}
	for _, st := range sts {
		if strings.HasPrefix(st.Ref, invRefPrefix) {
			fail("ingest %s left (%d of %d bytes)", st.Ref, st.Offset, st.Total)
		}
	}

	bad = append(bad, invProbeLeases(t, d)...)
	bad = append(bad, invCache(t, d, dataDir, leaseList, states)...)
	sort.Strings(bad)
	return bad
}

// invLeaseContent lists the content a lease holds; a lease released since it
// was listed is an error, not a failure of the test (the agent may be up).
func invLeaseContent(ctx context.Context, d *daemon, l leases.Lease) (map[digest.Digest]bool, error) {
	res, err := d.Client.LeasesService().ListResources(ctx, l)
	if err != nil {
		return nil, fmt.Errorf("listing its resources: %w", err)
	}
	out := map[digest.Digest]bool{}
	for _, r := range res {
		if r.Type == "content" {
			out[digest.Digest(r.ID)] = true
		}
	}
	return out, nil
}

// invHostBlobs lists the blobs of the host platform's image under target;
// a blob that cannot be read on the way is an error.
func invHostBlobs(ctx context.Context, d *daemon, target ocispec.Descriptor) ([]ocispec.Descriptor, error) {
	var out []ocispec.Descriptor
	h := images.HandlerFunc(func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		out = append(out, desc)
		return images.Children(ctx, d.Client.ContentStore(), desc)
	})
	handler := images.LimitManifests(images.FilterPlatforms(h, platforms.Default()), platforms.Default(), 1)
	if err := images.Walk(ctx, handler, target); err != nil {
		return out, fmt.Errorf("walking %s: %w", target.Digest, err)
	}
	return out, nil
}

// invReadable reads the first byte of a blob: containerd's metadata (Info,
// images.Check through the client) lists a blob whose file is gone; only a
// read finds out.
func invReadable(ctx context.Context, cs content.Store, desc ocispec.Descriptor) error {
	if desc.Size == 0 {
		return nil
	}
	ra, err := cs.ReaderAt(ctx, desc)
	if err != nil {
		return fmt.Errorf("opening: %w", err)
	}
	defer ra.Close()
	if _, err := ra.ReadAt(make([]byte, 1), 0); err != nil {
		return fmt.Errorf("reading: %w", err)
	}
	return nil
}

// invDigestName turns repo:tag into repo@d.
func invDigestName(name string, d digest.Digest) string {
	repo := name
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		repo = name[:i]
	}
	return repo + "@" + d.String()
}

// invKeptName reports whether a kept source's lease names the image: kept
// imports stay pinned after their file is gone.
func invKeptName(ls []leases.Lease, name string) bool {
	for _, l := range ls {
		if l.Labels[invKept] == "" {
			continue
		}
		for k, v := range l.Labels {
			if strings.Contains(k, name) || strings.Contains(v, name) {
				return true
			}
		}
	}
	return false
}

// invCache checks the data dir's state cache: a copy the store names as the
// state of an existing lease must list only blobs the lease holds and the
// store has.
func invCache(t *testing.T, d *daemon, dataDir string, ls []leases.Lease, states map[string]digest.Digest) []string {
	t.Helper()
	dir := filepath.Join(dataDir, "state")
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatalf("invariants: reading %s: %v", dir, err)
	}
	byID := map[string]leases.Lease{}
	for _, l := range ls {
		byID[l.ID] = l
	}
	var bad []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue // a copy being written by ReplaceFile's temp file
		}
		path := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			continue // pruned by a pass meanwhile
		}
		if err != nil {
			t.Fatalf("invariants: %v", err)
		}
		alg, hex, _ := strings.Cut(e.Name(), "-")
		name := digest.NewDigestFromEncoded(digest.Algorithm(alg), hex)
		if name.Validate() != nil || name.Algorithm().FromBytes(data) != name {
			continue // never used: a copy is used only if its bytes have its digest
		}
		var st struct {
			Lease  string          `json:"lease"`
			Source string          `json:"source"`
			Blobs  []digest.Digest `json:"blobs"`
		}
		if err := json.Unmarshal(data, &st); err != nil {
			bad = append(bad, fmt.Sprintf("state cache %s: %v", e.Name(), err))
			continue
		}
		if states[st.Lease] != name {
			continue // the store does not name it: never used (the next listing prunes it)
		}
		l, ok := byID[st.Lease]
		if !ok {
			continue // released: its state blob waits for the GC, and is never read
		}
		held, err := invLeaseContent(d.ctx(), d, l)
		if err != nil {
			continue // released meanwhile: its copy is no longer used
		}
		for _, b := range st.Blobs {
			if !held[b] {
				bad = append(bad, fmt.Sprintf("state cache %s (source %s): blob %s not held by lease %s", e.Name(), st.Source, b, l.ID))
			} else if _, err := d.Client.ContentStore().Info(d.ctx(), b); errdefs.IsNotFound(err) {
				bad = append(bad, fmt.Sprintf("state cache %s (source %s): blob %s is gone from the store", e.Name(), st.Source, b))
			}
		}
	}
	return bad
}

// TestInvariantsCatch: the checker itself finds what it is for, on a store
// a sync left right and then broken by hand: a pin label stripped, a stray
// lease, a layer file removed under containerd.
func TestInvariantsCatch(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	img := build(t, fixture.ImageSpec{Names: []string{"e2e.local/inv/app:1"}})
	path := filepath.Join(imagesDir, "app.tar")
	writeDockerSave(t, path, img)
	if res := d.sync(t, dataDir, imagesDir); res.Code != 0 {
		t.Fatalf("sync exited %d\n%s", res.Code, res.Stderr)
	}
	sources := map[string][]*fixture.Image{path: {img}}
	if bad := invCheck(t, d, dataDir, []string{imagesDir}, sources); len(bad) > 0 {
		t.Fatalf("invariants after a sync:\n%s", strings.Join(bad, "\n"))
	}
	expect := func(what, want string) {
		t.Helper()
		bad := invCheck(t, d, dataDir, []string{imagesDir}, sources)
		if !slices.ContainsFunc(bad, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("%s: no violation saying %q in %q", what, want, bad)
		}
	}

	rec, _ := d.record(t, "e2e.local/inv/app:1")
	delete(rec.Labels, invPinned)
	if _, err := d.Client.ImageService().Update(d.ctx(), rec, "labels."+invPinned); err != nil {
		t.Fatal(err)
	}
	expect("holdfast's label stripped", "without io.holdfast.pinned")

	stray, err := d.Client.LeasesService().Create(d.ctx(), leases.WithID("holdfast/stray"), leases.WithLabels(map[string]string{invSource: filepath.Join(imagesDir, "gone.tar")}))
	if err != nil {
		t.Fatal(err)
	}
	expect("a stray lease", "lease holdfast/stray")
	if err := d.Client.LeasesService().Delete(d.ctx(), stray); err != nil {
		t.Fatal(err)
	}

	blobs := d.hostBlobs(t, rec.Target)
	layer := blobs[len(blobs)-1]
	if err := os.Remove(filepath.Join(directContentRoot(t, d), "blobs", "sha256", layer.Digest.Encoded())); err != nil {
		t.Fatal(err)
	}
	expect("a layer file removed", layer.Digest.String())
}

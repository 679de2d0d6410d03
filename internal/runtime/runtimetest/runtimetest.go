// Package runtimetest is the behaviour every runtime.Runtime must have where
// holdfast's promises rest on it: pins that touch nothing else, a user's own
// pin outliving holdfast's, retargeting, and leases that are holdfast's only.
// The fake passes it in unit tests; containerd's adapter passes it in the
// end-to-end suite, on every containerd the suite runs. A backend that passes
// it can be trusted with the agent's logic that the fake's unit tests check.
package runtimetest

import (
	"context"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// Backend is one store under test.
type Backend struct {
	Runtime runtime.Backend
	// CreateRecord makes an image record as a user, a pull or the CRI would,
	// with exactly these labels.
	CreateRecord func(t *testing.T, img runtime.Image)
	// Targets are two image targets whose content the store holds (each a
	// single-platform image of the host's platform).
	Targets [2]ocispec.Descriptor
	// Archive opens an archive of one image, named Name.
	Archive func() (io.ReadCloser, error)
	Name    string
	// Import and LeaseWants are the import use case (importer.Import and
	// importer.LeaseWants), handed in by the caller: the runtime's packages
	// import no use case.
	Import     func(context.Context, runtime.Store, runtime.ImportRequest) (runtime.ImportResult, error)
	LeaseWants func(context.Context, runtime.Store, runtime.LeaseRequest) (runtime.ImportResult, error)
	// Settled, when the store has writers of its own (the CRI labels every
	// record it learns of, and on containerd 1.6 writes the record again
	// from its own read), waits until they are done with a record holdfast
	// just created, so that what the case does next is not raced by them.
	Settled func(t *testing.T, name string)
}

// Run runs the suite; newBackend makes a fresh store for each test. Record
// names start with prefix, which no other record of the store has.
func Run(t *testing.T, prefix string, newBackend func(t *testing.T) Backend) {
	for _, c := range []struct {
		name string
		f    func(*testing.T, Backend, string)
	}{
		{"PinCreates", pinCreates},
		{"PinTwiceChangesNothing", pinTwice},
		{"PinRetargets", pinRetargets},
		{"PinKeepsOtherLabels", pinKeepsOtherLabels},
		{"UserPinOutlivesHoldfasts", userPinOutlives},
		{"UnpinLeavesForeignPins", unpinLeavesForeign},
		{"ReleaseOnlyHoldfasts", releaseOnlyHoldfasts},
		{"DeleteOnlyWhatHoldfastMade", deleteOnlyMade},
		{"ImportLeasesThenUnchanged", importLeases},
		{"ImportWritesNoRecord", importWritesNoRecord},
		{"LeaseWantsLeasesWhatIsThere", leaseWants},
		{"ExportReadsBlobs", exportReadsBlobs},
	} {
		t.Run(c.name, func(t *testing.T) { c.f(t, newBackend(t), prefix+c.name+":1") })
	}
}

func record(t *testing.T, b Backend, name string) (runtime.Image, bool) {
	t.Helper()
	recs, err := b.Runtime.Records(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Name == name {
			return r, true
		}
	}
	return runtime.Image{}, false
}

func pinned(img runtime.Image) bool { return img.Pinned() && img.Owned() }

func pin(t *testing.T, b Backend, w runtime.Want, first bool) runtime.PinResult {
	t.Helper()
	res, err := b.Runtime.Pin(context.Background(), w, runtime.FirstPin(first))
	if err != nil {
		t.Fatalf("pin %s: %v", w.Name, err)
	}
	return res
}

func unpin(t *testing.T, b Backend, name string) {
	t.Helper()
	if err := b.Runtime.Unpin(context.Background(), name); err != nil {
		t.Fatalf("unpin %s: %v", name, err)
	}
}

// pinCreates: pinning a name that has no record makes one, at the target,
// with both pin labels.
func pinCreates(t *testing.T, b Backend, name string) {
	res := pin(t, b, runtime.Want{Name: name, Target: b.Targets[0]}, true)
	img, ok := record(t, b, name)
	if !ok || !pinned(img) || img.Target.Digest != b.Targets[0].Digest || !res.Created {
		t.Errorf("after a pin of a missing record: %+v (found %v), result %+v", img, ok, res)
	}
}

// pinTwice: a second pin of a pinned record changes nothing.
func pinTwice(t *testing.T, b Backend, name string) {
	w := runtime.Want{Name: name, Target: b.Targets[0]}
	pin(t, b, w, true)
	if res := pin(t, b, w, false); res.Changed() {
		t.Errorf("a second pin changed the record: %+v", res)
	}
}

// pinRetargets: a record someone pointed elsewhere is pointed back and pinned.
func pinRetargets(t *testing.T, b Backend, name string) {
	b.CreateRecord(t, runtime.Image{Name: name, Target: b.Targets[1]})
	res := pin(t, b, runtime.Want{Name: name, Target: b.Targets[0]}, true)
	img, _ := record(t, b, name)
	if !res.Retargeted || img.Target.Digest != b.Targets[0].Digest || !pinned(img) {
		t.Errorf("pin over a re-pointed record: %+v, result %+v", img, res)
	}
}

// pinKeepsOtherLabels: pin and unpin touch no label but the pin labels.
func pinKeepsOtherLabels(t *testing.T, b Backend, name string) {
	b.CreateRecord(t, runtime.Image{Name: name, Target: b.Targets[0], Labels: map[string]string{"example.com/owner": "team-a"}})
	pin(t, b, runtime.Want{Name: name, Target: b.Targets[0]}, true)
	unpin(t, b, name)
	img, _ := record(t, b, name)
	if img.Labels["example.com/owner"] != "team-a" || img.Pinned() || img.Owned() {
		t.Errorf("after pin and unpin: labels %v; want the owner label alone", img.Labels)
	}
}

// userPinOutlives: a CRI pin a user set before holdfast's first pin stays
// when holdfast unpins.
func userPinOutlives(t *testing.T, b Backend, name string) {
	b.CreateRecord(t, runtime.Image{Name: name, Target: b.Targets[0], Labels: map[string]string{runtime.LabelCRIPinned: runtime.PinnedValue}})
	pin(t, b, runtime.Want{Name: name, Target: b.Targets[0]}, true)
	img, _ := record(t, b, name)
	if !pinned(img) || img.Labels[runtime.LabelPriorPin] != "true" {
		t.Fatalf("pin over a user's pin: labels %v; want both pins and the prior pin", img.Labels)
	}
	unpin(t, b, name)
	img, _ = record(t, b, name)
	if !img.Pinned() || img.Owned() || img.Labels[runtime.LabelPriorPin] != "" {
		t.Errorf("after unpin: labels %v; want the user's CRI pin alone", img.Labels)
	}
}

// unpinLeavesForeign: unpin leaves a record holdfast does not own as it is.
func unpinLeavesForeign(t *testing.T, b Backend, name string) {
	b.CreateRecord(t, runtime.Image{Name: name, Target: b.Targets[0], Labels: map[string]string{runtime.LabelCRIPinned: runtime.PinnedValue}})
	unpin(t, b, name)
	img, ok := record(t, b, name)
	if !ok || !img.Pinned() {
		t.Errorf("unpin of a record holdfast does not own: %+v (found %v); want it untouched", img, ok)
	}
}

// releaseOnlyHoldfasts: a lease that is not holdfast's is never released.
func releaseOnlyHoldfasts(t *testing.T, b Backend, _ string) {
	if err := b.Runtime.Release(context.Background(), "someone-else/lease"); err == nil {
		t.Error("a lease outside holdfast/ was released")
	}
}

// importLeases: an import leases the archive's images under the source's
// lease, Sources reports it complete and intact, as the import's result said
// it would (a pass plans with that result rather than list the leases
// again), the same identity again is unchanged, and a release ends it.
func importLeases(t *testing.T, b Backend, name string) {
	ctx := context.Background()
	source := "/conformance/" + strings.NewReplacer("/", "_", ":", "_").Replace(name) + ".tar"
	req := runtime.ImportRequest{Source: source, Identity: "id-1", Open: b.Archive}
	res, err := b.Import(ctx, b.Runtime.ImportStore(), req)
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	if res.Lease != runtime.LeaseID(source, "id-1") || res.Unchanged || !slices.ContainsFunc(res.Images, func(w runtime.Want) bool { return w.Name == b.Name }) {
		t.Fatalf("import: %+v; want lease %s with %s", res, runtime.LeaseID(source, "id-1"), b.Name)
	}
	st := stateAsListed(t, b, res)
	if st.Source != source || st.Identity != "id-1" || !st.Complete || !st.Intact || len(st.Images) != len(res.Images) || len(st.Blobs) == 0 {
		t.Fatalf("Sources reports %+v", st)
	}
	req.Prior = &st
	req.Open = func() (io.ReadCloser, error) { t.Error("an unchanged source was opened"); return b.Archive() }
	if again, err := b.Import(ctx, b.Runtime.ImportStore(), req); err != nil || !again.Unchanged {
		t.Errorf("the same identity again: %+v, %v; want unchanged", again, err)
	}
	if err := b.Runtime.Release(ctx, res.Lease); err != nil {
		t.Fatal(err)
	}
	states, _ := b.Runtime.Sources(ctx)
	for _, s := range states {
		if s.Lease == res.Lease {
			t.Errorf("released lease %s still reported", res.Lease)
		}
	}
}

// stateAsListed is the state Sources reports on res's lease, which must be
// the state res says the import or lease left there: a pass plans with that
// result rather than list the leases again.
func stateAsListed(t *testing.T, b Backend, res runtime.ImportResult) runtime.SourceState {
	t.Helper()
	states, err := b.Runtime.Sources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var st runtime.SourceState
	for _, s := range states {
		if s.Lease == res.Lease {
			st = s
		}
	}
	sameWant := func(a, b runtime.Want) bool { return a.Name == b.Name && a.Target.Digest == b.Target.Digest }
	if got := res.State; got.Lease != st.Lease || got.Source != st.Source || got.Identity != st.Identity || got.Complete != st.Complete ||
		got.Intact != st.Intact || got.Format != st.Format || !maps.Equal(got.Skipped, st.Skipped) ||
		!slices.Equal(got.Blobs, st.Blobs) || !slices.EqualFunc(got.Images, st.Images, sameWant) {
		t.Errorf("the result says the state is %+v; Sources reports %+v", got, st)
	}
	return st
}

// importWritesNoRecord: an import leases content and writes no image record
// (a pass pins what it imported); the record a pin then makes points at the
// imported target.
func importWritesNoRecord(t *testing.T, b Backend, _ string) {
	ctx := context.Background()
	res, err := b.Import(ctx, b.Runtime.ImportStore(), runtime.ImportRequest{Source: "/conformance/records.tar", Identity: "id-1", Open: b.Archive})
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	t.Cleanup(func() { _ = b.Runtime.Release(ctx, res.Lease) })
	for _, w := range res.Images {
		if _, ok := record(t, b, w.Name); ok {
			t.Errorf("the import wrote a record for %s", w.Name)
		}
	}
	i := slices.IndexFunc(res.Images, func(w runtime.Want) bool { return w.Name == b.Name })
	if i < 0 {
		t.Fatalf("the import wants %+v, not %s", res.Images, b.Name)
	}
	pin(t, b, res.Images[i], true)
	t.Cleanup(func() { unpin(t, b, b.Name) })
	if rec, ok := record(t, b, b.Name); !ok || rec.Target.Digest != res.Images[i].Target.Digest || !pinned(rec) {
		t.Errorf("after the pin: %+v (found %v); want it pinned at %s", rec, ok, res.Images[i].Target.Digest)
	}
}

// leaseWants: a list's lease holds the content of the images it names that
// the store has whole, its state names just those, the others are left out
// with an error naming them, and the same identity again is unchanged.
func leaseWants(t *testing.T, b Backend, name string) {
	ctx := context.Background()
	source := "/conformance/" + strings.NewReplacer("/", "_", ":", "_").Replace(name) + ".pins"
	there := runtime.Want{Name: name, Target: b.Targets[0]}
	missing := runtime.Want{Name: name + "-missing", Target: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest,
		Digest: digest.FromString("not in the store " + name), Size: 123}}
	req := runtime.LeaseRequest{Source: source, Identity: "id-1", Wants: []runtime.Want{there, missing}}
	res, err := b.LeaseWants(ctx, b.Runtime.ImportStore(), req)
	if err == nil || !strings.Contains(err.Error(), missing.Name) {
		t.Errorf("leasing a want whose content is not there: error %v, want one naming %s", err, missing.Name)
	}
	t.Cleanup(func() { _ = b.Runtime.Release(ctx, res.Lease) })
	if res.Lease != runtime.LeaseID(source, "id-1") || len(res.Images) != 1 || res.Images[0].Name != there.Name {
		t.Fatalf("lease wants: %+v; want lease %s with %s alone", res, runtime.LeaseID(source, "id-1"), there.Name)
	}
	st := stateAsListed(t, b, res)
	if !st.Complete || !st.Intact || len(st.Images) != 1 || len(st.Blobs) < 2 || !slices.Contains(st.Blobs, b.Targets[0].Digest) {
		t.Errorf("Sources reports %+v; want it complete, wanting %s, its manifest among at least 2 blobs", st, there.Name)
	}
	again, err := b.LeaseWants(ctx, b.Runtime.ImportStore(), runtime.LeaseRequest{Source: source, Identity: "id-1", Wants: req.Wants})
	if err != nil || !again.Unchanged || len(again.Images) != 1 {
		t.Errorf("the same identity again: %+v, %v; want unchanged", again, err)
	}
}

// deleteOnlyMade: Delete removes a record holdfast's pin created, at its
// target; it leaves a record a user made (pinned by holdfast or not), and
// one holdfast made that was re-pointed since.
func deleteOnlyMade(t *testing.T, b Backend, name string) {
	ctx := context.Background()
	del := func(n string, target digest.Digest) {
		t.Helper()
		if err := b.Runtime.Delete(ctx, n, target); err != nil {
			t.Fatalf("delete %s: %v", n, err)
		}
	}
	made := runtime.Want{Name: name, Target: b.Targets[0]}
	pin(t, b, made, true)
	if img, ok := record(t, b, name); !ok || !img.Made() {
		t.Fatalf("a record holdfast's pin created is not marked as made: %+v", img)
	}
	if b.Settled != nil {
		b.Settled(t, name)
	}
	del(name, b.Targets[1].Digest)
	if _, ok := record(t, b, name); !ok {
		t.Fatal("Delete at another target deleted the record")
	}
	del(name, b.Targets[0].Digest)
	if img, ok := record(t, b, name); ok {
		t.Errorf("the record holdfast made is still there: %+v", img)
	}
	user := name + "-user"
	b.CreateRecord(t, runtime.Image{Name: user, Target: b.Targets[0]})
	pin(t, b, runtime.Want{Name: user, Target: b.Targets[0]}, true)
	del(user, b.Targets[0].Digest)
	if img, ok := record(t, b, user); !ok || img.Made() {
		t.Errorf("a record a user made was deleted, or marked as holdfast's: %+v (found %v)", img, ok)
	}
}

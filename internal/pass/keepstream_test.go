package pass

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
)

// dockerSave is a docker save archive of one image named name.
func dockerSave(t *testing.T, name string, seed int64) ([]byte, *fixture.Image) {
	t.Helper()
	img, err := fixture.Build(context.Background(), fixture.ImageSpec{Names: []string{name}, Layers: fixture.UniformLayers(2, 16<<10, false, seed)})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := fixture.WriteDockerSave(context.Background(), &b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), img
}

// TestKeepStream: an archive read from a stream is a kept source named by
// the digest of its bytes, on one lease that holds every blob of its image
// (the lease it was read under is gone), its image pinned. The same bytes
// again are the same source, unchanged; other bytes another source beside
// it; a cut stream fails naming standard input and leaves no lease.
func TestKeepStream(t *testing.T) {
	ctx := context.Background()
	rt := fake.New()
	app, appImg := dockerSave(t, "example.com/stream/app:1", 1)
	k, err := KeepStream(ctx, rt, bytes.NewReader(app), Standing{}, KeepOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sum := digest.FromBytes(app)
	if want := "stdin@sha256:" + sum.Encoded()[:12]; k.Path != want || k.Result.Unchanged || len(k.Result.Images) != 2 {
		t.Errorf("kept %s (unchanged %v, %d images); want %s, imported, 2 images (its name and name@digest)", k.Path, k.Result.Unchanged, len(k.Result.Images), want)
	}
	if !pinnedIn(rt, "example.com/stream/app:1") {
		t.Error("the stream's image is not pinned")
	}
	if n := rt.Leases(); n != 1 {
		t.Errorf("%d leases, want the kept source's alone", n)
	}
	held := []digest.Digest{appImg.Target.Digest}
	for _, l := range appImg.Manifests[0].Layers {
		held = append(held, l.Digest())
	}
	for _, d := range held {
		if !rt.LeaseHolds(k.Result.Lease, d) {
			t.Errorf("lease %s does not hold %s", k.Result.Lease, d)
		}
	}
	st, ok := rt.State(k.Result.Lease)
	if !ok || !st.Kept || st.Source != k.Path || st.Identity != sum.String() {
		t.Errorf("state of %s: %v %+v; want kept, source %s, identity %s", k.Result.Lease, ok, st, k.Path, sum)
	}
	if labels := rt.LeaseLabels(k.Result.Lease); labels["io.holdfast.kept"] != "true" || labels["io.holdfast.source"] != "kept:"+k.Path {
		t.Errorf("labels of %s: %v", k.Result.Lease, labels)
	}

	again, err := KeepStream(ctx, rt, bytes.NewReader(app), Standing{}, KeepOptions{})
	if err != nil || !again.Result.Unchanged || again.Result.Lease != k.Result.Lease || rt.Leases() != 1 {
		t.Errorf("the same bytes again: %v, unchanged %v, lease %s, %d leases; want unchanged on %s alone", err, again.Result.Unchanged, again.Result.Lease, rt.Leases(), k.Result.Lease)
	}

	other, _ := dockerSave(t, "example.com/stream/other:1", 2)
	o, err := KeepStream(ctx, rt, bytes.NewReader(other), Standing{}, KeepOptions{})
	if err != nil || o.Path == k.Path || len(o.Replaced) != 0 || rt.Leases() != 2 {
		t.Errorf("other bytes: %v, %s, replaced %v, %d leases; want a second kept source beside the first", err, o.Path, o.Replaced, rt.Leases())
	}
	if !pinnedIn(rt, "example.com/stream/app:1") || !pinnedIn(rt, "example.com/stream/other:1") {
		t.Error("both streams' images are not pinned")
	}

	cut, _ := dockerSave(t, "example.com/stream/cut:1", 3)
	_, err = KeepStream(ctx, rt, bytes.NewReader(cut[:len(cut)/2]), Standing{}, KeepOptions{})
	if err == nil || !strings.HasPrefix(err.Error(), "import standard input: ") {
		t.Errorf("a cut stream: %v; want an error naming standard input", err)
	}
	if _, ok := rt.Record("example.com/stream/cut:1"); ok || rt.Leases() != 2 {
		t.Errorf("a cut stream left a record (%v) or a lease (%d leases, want 2)", ok, rt.Leases())
	}
}

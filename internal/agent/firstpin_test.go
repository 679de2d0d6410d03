package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/holdfast-project/holdfast/internal/pass"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
	"github.com/holdfast-project/holdfast/internal/testenv/testimage"
)

// eventBeforeFirstPin is a store in which an image event for a name reaches
// the agent just before the pass pins that name for the first time, as one
// can on a busy node.
type eventBeforeFirstPin struct {
	*fake.Runtime
	a    *Agent
	sent bool
}

func (r *eventBeforeFirstPin) Pin(ctx context.Context, w hfruntime.Want, opts ...hfruntime.PinOption) (hfruntime.PinResult, error) {
	if hfruntime.ApplyPinOptions(opts).First && !r.sent {
		r.sent = true
		r.a.heal.onImageEvent(ctx, hfruntime.ImageEvent{Kind: hfruntime.ImageUpdated, Name: w.Name})
	}
	return r.Runtime.Pin(ctx, w, opts...)
}

// TestUsersPinSurvivesAnEarlyEvent: a user pinned an image by hand before an
// archive brought it. An event for it during the pass that first pins it
// must not let a heal pin it first, unaware of the user's pin: when the
// archive goes, the user's pin stays.
func TestUsersPinSurvivesAnEarlyEvent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	archive := filepath.Join(dir, "app")
	app := testimage.Dir(t, archive, "example.com/app:1")[0]

	base := fake.New()
	base.Create(hfruntime.Image{Name: app.Name, Target: app.Target,
		Labels: map[string]string{hfruntime.LabelCRIPinned: hfruntime.PinnedValue}})
	rt := &eventBeforeFirstPin{Runtime: base}
	a := New(rt, dirsConfig(dir), nil)
	rt.a = a
	ctx := context.Background()

	a.passes.Run(ctx, pass.Options{})
	if !rt.sent {
		t.Fatal("the pass never pinned the name for the first time")
	}
	rec, _ := base.Record(app.Name)
	if rec.Labels[hfruntime.LabelPriorPin] != "true" {
		t.Fatalf("after the first pin: labels %v, want the user's pin recorded (%s=true)", rec.Labels, hfruntime.LabelPriorPin)
	}

	if err := os.RemoveAll(archive); err != nil {
		t.Fatal(err)
	}
	a.passes.Run(ctx, pass.Options{})
	rec, _ = base.Record(app.Name)
	if rec.Owned() || !rec.Pinned() {
		t.Errorf("archive gone: labels %v, want holdfast's pin gone and the user's CRI pin kept", rec.Labels)
	}
}

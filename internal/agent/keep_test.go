package agent

import (
	"context"
	"testing"

	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
)

var bothPins = map[string]string{hfruntime.LabelCRIPinned: hfruntime.PinnedValue, hfruntime.LabelPinned: hfruntime.PinnedValue}

func TestPinByAnotherProcessBringsOnAPass(t *testing.T) {
	ctx := context.Background()
	a := New(fake.New(), Config{}, nil)
	a.Pinned(map[string]hfruntime.Want{"mine:1": wantOf("mine:1")}, nil)
	for _, kind := range []hfruntime.ImageEventKind{hfruntime.ImageCreated, hfruntime.ImageUpdated} {
		if !a.heal.onImageEvent(ctx, hfruntime.ImageEvent{Kind: kind, Name: "kept:1", Labels: bothPins}) {
			t.Errorf("%s of an unwanted name with holdfast's pin: no pass", kind)
		}
		if a.heal.onImageEvent(ctx, hfruntime.ImageEvent{Kind: kind, Name: "mine:1", Labels: bothPins}) {
			t.Errorf("%s of a wanted name with holdfast's pin: a pass", kind)
		}
	}
	if a.heal.onImageEvent(ctx, hfruntime.ImageEvent{Kind: hfruntime.ImageUpdated, Name: "other:1"}) {
		t.Error("an update of an unwanted name without holdfast's pin: a pass")
	}

	// During a pass the answer waits for the pass's wanted set.
	a.Begin()
	if a.heal.onImageEvent(ctx, hfruntime.ImageEvent{Kind: hfruntime.ImageCreated, Name: "kept:2", Labels: bothPins}) ||
		a.heal.onImageEvent(ctx, hfruntime.ImageEvent{Kind: hfruntime.ImageCreated, Name: "new:1", Labels: bothPins}) {
		t.Fatal("a pass during a pass")
	}
	a.Pinned(map[string]hfruntime.Want{"new:1": wantOf("new:1")}, nil)
	if !a.heal.afterPass(ctx, a.heal.takeTouched()) {
		t.Error("kept:2, pinned elsewhere during the pass and not wanted after it: no pass")
	}
	a.Begin()
	a.heal.onImageEvent(ctx, hfruntime.ImageEvent{Kind: hfruntime.ImageCreated, Name: "new:1", Labels: bothPins})
	a.Pinned(map[string]hfruntime.Want{"new:1": wantOf("new:1")}, nil)
	if a.heal.afterPass(ctx, a.heal.takeTouched()) {
		t.Error("the pass's own first pin brought on another pass")
	}

	// The pass's own pin may also show as an update (labels set on a record
	// that exists), before the pass has its wanted set: that too waits for it.
	a.Pinned(nil, nil)
	a.Begin()
	if a.heal.onImageEvent(ctx, hfruntime.ImageEvent{Kind: hfruntime.ImageUpdated, Name: "new:2", Labels: bothPins}) {
		t.Error("an update with holdfast's pin during a pass brought on a pass before the pass's wanted set")
	}
	a.Pinned(map[string]hfruntime.Want{"new:2": wantOf("new:2")}, nil)
	if a.heal.afterPass(ctx, a.heal.takeTouched()) {
		t.Error("the pass's own pin, seen as an update, brought on another pass")
	}
}

func TestKeptNameThatLostItsPinBringsOnAPassNotAHeal(t *testing.T) {
	ctx := context.Background()
	rt := fake.New()
	a := New(rt, Config{}, nil)
	a.Pinned(map[string]hfruntime.Want{"kept:1": wantOf("kept:1"), "dir:1": wantOf("dir:1")}, map[string]bool{"kept:1": true})
	if !a.heal.onImageEvent(ctx, hfruntime.ImageEvent{Kind: hfruntime.ImageUpdated, Name: "kept:1"}) {
		t.Error("a kept name that lost holdfast's pin: no pass")
	}
	if n := rt.PinsOf("kept:1"); n != 0 {
		t.Errorf("a kept name that lost holdfast's pin was healed at once (%d pins): it may have been released", n)
	}
	a.heal.onImageEvent(ctx, hfruntime.ImageEvent{Kind: hfruntime.ImageUpdated, Name: "dir:1"})
	if n := rt.PinsOf("dir:1"); n != 1 {
		t.Errorf("an images-dir name that lost its pin: %d pins, want a heal", n)
	}
	a.heal.onImageEvent(ctx, hfruntime.ImageEvent{Kind: hfruntime.ImageDeleted, Name: "kept:1"})
	if n := rt.PinsOf("kept:1"); n != 1 {
		t.Errorf("a deleted kept name: %d pins, want a heal", n)
	}
}

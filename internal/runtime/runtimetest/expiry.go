package runtimetest

import (
	"context"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// recordOutlivesExpiry: a record holdfast pins keeps its name through a GC
// although another writer set an expiry on it that has passed, and although
// another holdfast on the same store ran its pass's Cleanup meanwhile; once
// holdfast unpins it the expiry counts again. A control record that
// holdfast does not pin, expired the same way, shows that the GC ran and
// collects expired records (a store that Can.ExpireRecords), or that it
// keeps every record (1.x), where holdfast's record stays throughout.
func recordOutlivesExpiry(t *testing.T, s Store, name string) {
	if s.GC == nil || s.Label == nil {
		t.Skip("the store gives the suite no GC to force and no label to set")
	}
	ctx := context.Background()
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	b := s.Backend
	control := name + "-control"
	pin(t, b, runtime.Want{Name: name, Target: b.Targets[0]}, true)
	if b.Settled != nil {
		b.Settled(t, name)
	}
	b.CreateRecord(t, runtime.Image{Name: control, Target: b.Targets[1], Labels: map[string]string{runtime.LabelExpire: past}})
	if b.Settled != nil {
		b.Settled(t, control)
	}
	s.Label(t, name, runtime.LabelExpire, past)
	if err := s.Another(t).Cleanup(ctx); err != nil {
		t.Fatalf("another holdfast's Cleanup: %v", err)
	}
	if err := b.Runtime.Cleanup(ctx); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	s.GC(t)
	_, controlKept := record(t, b, control)
	switch {
	case s.Can.ExpireRecords && controlKept:
		t.Fatalf("the GC kept the expired control record %s: it did not run, or this store keeps expired records", control)
	case !s.Can.ExpireRecords && !controlKept:
		t.Fatalf("the GC collected the expired control record %s on a store that keeps every record", control)
	}
	img, ok := record(t, b, name)
	if !ok {
		t.Fatalf("the GC collected %s, which holdfast pins, for its expiry %s", name, past)
	}
	if !pinned(img) || img.Labels[runtime.LabelExpire] != past {
		t.Errorf("%s after the GC: labels %v, want holdfast's pin and the other writer's expiry untouched", name, img.Labels)
	}

	unpin(t, b, name)
	if err := b.Runtime.Cleanup(ctx); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	s.GC(t)
	_, ok = record(t, b, name)
	switch {
	case s.Can.ExpireRecords && ok:
		t.Errorf("%s outlived its expiry after holdfast unpinned it: the hold did not go with the pin", name)
	case !s.Can.ExpireRecords && !ok:
		t.Errorf("%s was collected on a store that keeps every record", name)
	}
}

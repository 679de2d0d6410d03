package e2e

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/runtime"
	hfcontainerd "github.com/holdfast-project/holdfast/internal/runtime/containerd"
)

// The lease of the content-root probe, as a user of the store sees it.
const (
	invProbe       = "io.holdfast.probe"
	invProbePrefix = "holdfast/probe-"
	invExpire      = "containerd.io/gc.expire"
	// invProbeLifeMax bounds how long after its creation a probe lease may
	// expire: a holdfast killed while it holds one leaves no more than that.
	invProbeLifeMax = time.Hour
)

// TestProbeLeaseIsShortLivedAndSwept: the lease holdfast makes to prove the
// content store's directory is holdfast's, labelled as a probe, expires
// within the hour, and is no source (Sources lists it not); a probe lease a
// killed holdfast left is deleted by the next pass's Cleanup once it has
// expired, and its blob is then collected, while a probe lease still live
// and a source lease whose ID happens to start like a probe's stay.
func TestProbeLeaseIsShortLivedAndSwept(t *testing.T) {
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		ls := d.Client.LeasesService()
		before := map[string]bool{}
		all, err := ls.List(d.ctx())
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range all {
			before[l.ID] = true
		}

		// The probe holdfast makes, left as a kill -9 would leave it.
		rt, err := hfcontainerd.New(ctx, d.Address, namespace, hfcontainerd.WithWritePath(hfcontainerd.WriteOptions{Path: hfcontainerd.WriteAuto}))
		if err != nil {
			t.Fatal(err)
		}
		closed := false
		t.Cleanup(func() {
			if !closed {
				_ = rt.Close()
			}
		})
		if why := rt.ContentRootOff(ctx); why != nil {
			t.Fatalf("the content root is not usable: %v", why)
		}
		all, err = ls.List(d.ctx())
		if err != nil {
			t.Fatal(err)
		}
		var made []leases.Lease
		for _, l := range all {
			if !before[l.ID] {
				made = append(made, l)
			}
		}
		if len(made) != 1 {
			t.Fatalf("the probe made %d leases, want 1: %v", len(made), made)
		}
		probe := made[0]
		if bad := probeLeaseFaults(probe); len(bad) > 0 {
			t.Errorf("the probe's lease: %s", strings.Join(bad, "; "))
		}
		if ids := sourceLeases(t, ctx, rt); slices.Contains(ids, probe.ID) {
			t.Errorf("Sources lists the probe's lease %s: %v", probe.ID, ids)
		}
		closed = true
		if err := rt.Close(); err != nil {
			t.Fatal(err)
		}
		if hasLease(t, d, probe.ID) {
			t.Errorf("the probe's lease %s outlives Close", probe.ID)
		}

		// Leases a killed holdfast left: one whose life is over, one still
		// live; and a source's lease named like a probe's. containerd's GC
		// skips an expired lease: the one Close set off is over before they
		// are made, and nothing deletes anything after until Cleanup.
		collect(t, d)
		now := time.Now()
		stale := probeLease(t, d, "holdfast/probe-00000000000000aa", now.Add(-time.Minute))
		live := probeLease(t, d, "holdfast/probe-00000000000000bb", now.Add(10*time.Minute))
		sourceID := runtime.LeaseID("/images/probe-app.tar", "id-1")
		if !strings.HasPrefix(sourceID, invProbePrefix) {
			t.Fatalf("the source lease %s does not look like a probe's", sourceID)
		}
		if _, err := ls.Create(d.ctx(), leases.WithID(sourceID), leases.WithLabels(map[string]string{invSource: "/images/probe-app.tar"})); err != nil {
			t.Fatal(err)
		}
		staleBlob := probeBlob(t, d, stale)
		liveBlob := probeBlob(t, d, live)
		if !hasLease(t, d, stale) {
			t.Fatalf("lease %s is gone before any Cleanup", stale)
		}

		rt2, err := hfcontainerd.New(ctx, d.Address, namespace)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rt2.Close() })
		if err := rt2.Cleanup(ctx); err != nil {
			t.Fatalf("Cleanup: %v", err)
		}
		if hasLease(t, d, stale) {
			t.Errorf("Cleanup left the expired probe lease %s", stale)
		}
		if !hasLease(t, d, live) {
			t.Errorf("Cleanup deleted the live probe lease %s", live)
		}
		if !hasLease(t, d, sourceID) {
			t.Errorf("Cleanup deleted the source lease %s", sourceID)
		}
		if ids := sourceLeases(t, ctx, rt2); !slices.Equal(ids, []string{sourceID}) {
			t.Errorf("Sources lists %v, want only %s", ids, sourceID)
		}

		// A collection now takes the expired probe's blob, not the live one's.
		collect(t, d)
		if d.hasBlob(t, staleBlob) {
			t.Errorf("the expired probe's blob %s outlives a collection", staleBlob)
		}
		if !d.hasBlob(t, liveBlob) {
			t.Errorf("the live probe's blob %s was collected", liveBlob)
		}
	})
}

// probeLeaseFaults says what is wrong with a probe's lease: it must be
// holdfast's, labelled as a probe, and expire within invProbeLifeMax.
func probeLeaseFaults(l leases.Lease) []string {
	var bad []string
	if !strings.HasPrefix(l.ID, invProbePrefix) {
		bad = append(bad, fmt.Sprintf("ID %s does not start with %s", l.ID, invProbePrefix))
	}
	if l.Labels[invProbe] == "" {
		bad = append(bad, fmt.Sprintf("%s has no %s label (labels %v)", l.ID, invProbe, l.Labels))
	}
	exp, err := time.Parse(time.RFC3339, l.Labels[invExpire])
	switch {
	case err != nil:
		bad = append(bad, fmt.Sprintf("%s has no expiry (%s=%q)", l.ID, invExpire, l.Labels[invExpire]))
	case exp.Sub(l.CreatedAt) > invProbeLifeMax:
		bad = append(bad, fmt.Sprintf("%s expires %v after its creation, more than %v", l.ID, exp.Sub(l.CreatedAt).Round(time.Minute), invProbeLifeMax))
	}
	return bad
}

// probeLease makes a lease as holdfast makes a probe's, expiring at expire.
func probeLease(t *testing.T, d *daemon, id string, expire time.Time) string {
	t.Helper()
	labels := map[string]string{invProbe: "content-root", invExpire: expire.UTC().Format(time.RFC3339)}
	if _, err := d.Client.LeasesService().Create(d.ctx(), leases.WithID(id), leases.WithLabels(labels)); err != nil {
		t.Fatal(err)
	}
	return id
}

// probeBlob writes a blob of its own under lease id.
func probeBlob(t *testing.T, d *daemon, id string) digest.Digest {
	t.Helper()
	data := []byte("a probe blob of the test under " + id + "\n")
	desc := ocispec.Descriptor{MediaType: "application/octet-stream", Digest: digest.FromBytes(data), Size: int64(len(data))}
	ctx := leases.WithLease(d.ctx(), id)
	if err := content.WriteBlob(ctx, d.Client.ContentStore(), "probe-test-"+desc.Digest.Encoded()[:12], bytes.NewReader(data), desc); err != nil {
		t.Fatal(err)
	}
	return desc.Digest
}

// collect has containerd collect garbage, and waits for it.
func collect(t *testing.T, d *daemon) {
	t.Helper()
	ls := d.Client.LeasesService()
	l, err := ls.Create(d.ctx(), leases.WithRandomID())
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Delete(d.ctx(), l, leases.SynchronousDelete); err != nil {
		t.Fatal(err)
	}
}

func hasLease(t *testing.T, d *daemon, id string) bool {
	t.Helper()
	ls, err := d.Client.LeasesService().List(d.ctx(), fmt.Sprintf("id==%q", id))
	if err != nil {
		t.Fatal(err)
	}
	return len(ls) > 0
}

// sourceLeases is the leases rt's Sources lists.
func sourceLeases(t *testing.T, ctx context.Context, rt *hfcontainerd.Runtime) []string {
	t.Helper()
	states, err := rt.Sources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, st := range states {
		ids = append(ids, st.Lease)
	}
	return ids
}

// invProbeLeases checks the leases of content-root probes: each is
// holdfast's, labelled and short-lived (probeLeaseFaults), and no lease but
// holdfast's holds a probe blob (as one made under a random ID and kept for a
// day would).
func invProbeLeases(t *testing.T, d *daemon) []string {
	t.Helper()
	ls := d.Client.LeasesService()
	all, err := ls.List(d.ctx())
	if err != nil {
		t.Fatalf("invariants: listing leases: %v", err)
	}
	var bad []string
	for _, l := range all {
		if l.Labels[invProbe] != "" {
			bad = append(bad, probeLeaseFaults(l)...)
			continue
		}
		if strings.HasPrefix(l.ID, "holdfast/") {
			continue
		}
		res, err := ls.ListResources(d.ctx(), l)
		if err != nil {
			continue // deleted meanwhile
		}
		for _, r := range res {
			if r.Type != "content" {
				continue
			}
			cs := d.Client.ContentStore()
			info, err := cs.Info(d.ctx(), digest.Digest(r.ID))
			if err != nil || info.Size > 256 {
				continue // gone, or no probe blob
			}
			data, err := content.ReadBlob(d.ctx(), cs, ocispec.Descriptor{Digest: info.Digest, Size: info.Size})
			if err == nil && bytes.HasPrefix(data, []byte("holdfast: a probe")) {
				bad = append(bad, fmt.Sprintf("lease %s (labels %v) holds the probe blob %s and is not a probe lease of holdfast's", l.ID, l.Labels, r.ID))
			}
		}
	}
	return bad
}

// probesSwept lists the probe leases whose life was over before a pass
// that started at start: its Cleanup deleted them, so none may be left.
func probesSwept(t *testing.T, d *daemon, start time.Time) []string {
	t.Helper()
	all, err := d.Client.LeasesService().List(d.ctx(), fmt.Sprintf("labels.%q", invProbe))
	if err != nil {
		t.Fatalf("listing probe leases: %v", err)
	}
	var bad []string
	for _, l := range all {
		if exp, err := time.Parse(time.RFC3339, l.Labels[invExpire]); err == nil && exp.Before(start) {
			bad = append(bad, fmt.Sprintf("probe lease %s expired at %s, before the pass that started at %s, and is still there",
				l.ID, exp.Format(time.RFC3339), start.UTC().Format(time.RFC3339)))
		}
	}
	return bad
}

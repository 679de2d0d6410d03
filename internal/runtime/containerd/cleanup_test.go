package containerd

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/leases"

	"github.com/holdfast-project/holdfast/internal/datadir"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

func TestStaleIngests(t *testing.T) {
	t.Parallel()
	r := &Runtime{owner: "0123456789abcdef", run: "01234567"}
	now := time.Now()
	fresh, old := now.Add(-time.Minute), now.Add(-2*staleIngestAge)
	for _, tc := range []struct {
		ref     string
		updated time.Time
		stale   bool
	}{
		{"holdfast-0123456789abcdef-01234567-aabbccddeeff-1", old, false},  // this run's, however slow
		{"holdfast-0123456789abcdef-76543210-aabbccddeeff-1", fresh, true}, // this owner's earlier run
		{"holdfast-fedcba9876543210-01234567-aabbccddeeff-1", fresh, false},
		{"holdfast-fedcba9876543210-01234567-aabbccddeeff-1", old, true},
		{"holdfast-aabbcc-3", fresh, false}, // an older holdfast's ref: only by age
		{"holdfast-aabbcc-3", old, true},
		{"someone-else-1", old, false},
		{"holdfast-0123456789abcdef", fresh, false}, // not this owner's ref: the owner is followed by "-"
	} {
		if got := r.stale(content.Status{Ref: tc.ref, UpdatedAt: tc.updated}, now); got != tc.stale {
			t.Errorf("stale(%s, updated %s ago) = %v, want %v", tc.ref, now.Sub(tc.updated).Round(time.Minute), got, tc.stale)
		}
	}
}

// A probe killed mid-write leaves an ingest the next run of its data dir
// aborts, and this run does not.
func TestStaleProbeIngest(t *testing.T) {
	t.Parallel()
	r := &Runtime{owner: "0123456789abcdef", run: "01234567"}
	later := &Runtime{owner: r.owner, run: "76543210"}
	ref := r.probeRef()
	now := time.Now()
	if r.stale(content.Status{Ref: ref, UpdatedAt: now}, now) {
		t.Errorf("the probe ingest %s is stale to its own run", ref)
	}
	if !later.stale(content.Status{Ref: ref, UpdatedAt: now}, now) {
		t.Errorf("the probe ingest %s of an earlier run is not stale to a later run of its owner", ref)
	}
}

func TestOwnIngests(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := &Runtime{owner: "aaaaaaaaaaaaaaaa", run: "01234567"}
	if err := r.OwnIngests(dir); err != nil {
		t.Fatal(err)
	}
	first := r.owner
	if first == "aaaaaaaaaaaaaaaa" || !validOwner(first) {
		t.Fatalf("owner after the first OwnIngests = %q, want a new valid ID", first)
	}
	again := &Runtime{owner: "bbbbbbbbbbbbbbbb"}
	if err := again.OwnIngests(dir); err != nil {
		t.Fatal(err)
	}
	if again.owner != first {
		t.Errorf("a later run on the same data dir owns %q, want %q", again.owner, first)
	}
	if ing := again.newIngester(); !strings.HasPrefix(ing.nextRef(), refPrefix+first+"-") {
		t.Errorf("ingest ref %q does not carry the owner %s", ing.nextRef(), first)
	}

	// A damaged file is replaced by a new ID.
	path := datadir.At(dir).IngestOwner()
	if err := os.WriteFile(path, []byte("not-an-id\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	damaged := &Runtime{}
	if err := damaged.OwnIngests(dir); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !validOwner(damaged.owner) || strings.TrimSpace(string(data)) != damaged.owner {
		t.Errorf("after a damaged file: owner %q, file %q", damaged.owner, data)
	}
	if err := (&Runtime{}).OwnIngests(filepath.Join(path, "sub")); err == nil || !strings.Contains(err.Error(), "ingest-owner") {
		t.Errorf("OwnIngests under a file: %v, want an error naming ingest-owner", err)
	}
}

func TestProbeExpired(t *testing.T) {
	t.Parallel()
	now := time.Now()
	at := func(d time.Duration) string { return now.Add(d).UTC().Format(time.RFC3339) }
	probe := map[string]string{runtime.LabelProbe: "content-root"}
	with := func(labels map[string]string, extra ...string) map[string]string {
		out := maps.Clone(labels)
		for i := 0; i+1 < len(extra); i += 2 {
			out[extra[i]] = extra[i+1]
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		lease   leases.Lease
		expired bool
	}{
		{"expired", leases.Lease{ID: "holdfast/probe-aa", CreatedAt: now.Add(-time.Hour), Labels: with(probe, gcExpireLabel, at(-time.Minute))}, true},
		{"live", leases.Lease{ID: "holdfast/probe-bb", CreatedAt: now.Add(-time.Hour), Labels: with(probe, gcExpireLabel, at(time.Minute))}, false},
		{"no expiry, old", leases.Lease{ID: "holdfast/probe-cc", CreatedAt: now.Add(-2 * probeLife), Labels: probe}, true},
		{"no expiry, new", leases.Lease{ID: "holdfast/probe-dd", CreatedAt: now.Add(-time.Minute), Labels: probe}, false},
		{"bad expiry, new", leases.Lease{ID: "holdfast/probe-ee", CreatedAt: now, Labels: with(probe, gcExpireLabel, "soon")}, false},
		{"a source's, named like a probe's", leases.Lease{ID: "holdfast/probe-app.tar-aabbccddeeff-00112233", CreatedAt: now.Add(-2 * probeLife),
			Labels: map[string]string{runtime.LabelSource: "/images/probe-app.tar", gcExpireLabel: at(-time.Minute)}}, false},
		{"not holdfast's", leases.Lease{ID: "probe-ff", CreatedAt: now.Add(-2 * probeLife), Labels: with(probe, gcExpireLabel, at(-time.Minute))}, false},
	} {
		if got := probeExpired(tc.lease, now); got != tc.expired {
			t.Errorf("%s: probeExpired(%s %v) = %v, want %v", tc.name, tc.lease.ID, tc.lease.Labels, got, tc.expired)
		}
	}
}

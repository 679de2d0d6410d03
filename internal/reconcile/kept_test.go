package reconcile

import (
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

func keptLease(id, path string, created time.Time, complete bool, wants ...runtime.Want) runtime.SourceState {
	st := lease(id, path, "id-"+id, 1, wants...)
	st.Kept, st.Complete, st.CreatedAt = true, complete, created
	return st
}

func TestKeptSourceStaysWhenItsFileIsGoneFromAnImagesDir(t *testing.T) {
	now := time.Now()
	in := Input{
		// The kept file was in an images dir, and is gone; the images dir is scanned.
		Leases:          []runtime.SourceState{keptLease("k", "/images/a.tar", now.Add(-time.Hour*48), true, want("a:1", "a"))},
		Present:         present(),
		Unknown:         func(string) bool { return false },
		Records:         []runtime.Image{rec("a:1", "a", both)},
		KeptStaleBefore: now.Add(-time.Hour),
	}
	p := Diff(in)
	if len(p.Releases) != 0 || len(p.Unpins) != 0 {
		t.Fatalf("a kept source whose file is gone lost something: releases %v, unpins %v", p.Releases, p.Unpins)
	}
	if !p.KeptNames["a:1"] || p.WantedNames["a:1"].Name != "a:1" {
		t.Fatalf("a:1 is not wanted as kept: wanted %v, kept %v", p.WantedNames, p.KeptNames)
	}
}

func TestKeptSourceHealsItsRecord(t *testing.T) {
	in := Input{
		Leases:  []runtime.SourceState{keptLease("k", "/tmp/a.tar", time.Now(), true, want("a:1", "a"))},
		Present: present(),
		Unknown: func(string) bool { return false },
	}
	if got := summarize(Diff(in)).Pins["a:1"]; got != ReasonMissing {
		t.Fatalf("pin of a:1 = %q, want %q", got, ReasonMissing)
	}
}

func TestUnfinishedKeptImportIsStaleOnlyWhenOld(t *testing.T) {
	now := time.Now()
	in := Input{
		Leases: []runtime.SourceState{
			keptLease("young", "/tmp/young.tar", now.Add(-time.Minute), false),
			keptLease("old", "/tmp/old.tar", now.Add(-2*time.Hour), false),
			// An unfinished images-dir import is stale at once, as before.
			{Lease: "dir", Source: "/images/b.tar", Identity: "x"},
		},
		Present:         present("/images/b.tar", "x"),
		Unknown:         func(string) bool { return false },
		KeptStaleBefore: now.Add(-time.Hour),
	}
	got := summarize(Diff(in)).Releases
	if len(got) != 2 || got["old"] != ReasonStale || got["dir"] != ReasonStale {
		t.Fatalf("releases = %v, want old and dir as stale, young left alone", got)
	}
}

func TestKeptSourceDoesNotReplaceAnImagesDirSourceOfTheSamePath(t *testing.T) {
	// The images-dir archive changed and its new import failed: its old
	// lease stays wanted, although a kept import of the same path is complete.
	in := Input{
		Leases: []runtime.SourceState{
			lease("dir-old", "/images/a.tar", "old", 1, want("a:1", "a")),
			func() runtime.SourceState {
				st := keptLease("k", "/images/a.tar", time.Now(), true, want("k:1", "k"))
				st.Identity = "new"
				return st
			}(),
		},
		Present: present("/images/a.tar", "new"),
		Unknown: func(string) bool { return false },
	}
	if got := summarize(Diff(in)).Releases; len(got) != 0 {
		t.Fatalf("releases = %v, want none", got)
	}
}

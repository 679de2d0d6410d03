package runtime

import (
	"strings"
	"testing"
)

// TestLeaseIDs: an images-dir source's lease and a kept source's of the same
// path and identity differ, both are holdfast's, and both change with the
// identity.
func TestLeaseIDs(t *testing.T) {
	a, k := LeaseID("/var/lib/images/app.tar", "id1"), KeptLeaseID("/var/lib/images/app.tar", "id1")
	if !strings.HasPrefix(a, LeasePrefix+"app.tar-") || !strings.HasPrefix(k, LeasePrefix+"kept-app.tar-") || a == k {
		t.Errorf("lease IDs %q and %q", a, k)
	}
	if LeaseID("/var/lib/images/app.tar", "id2") == a {
		t.Error("a new identity keeps the lease ID")
	}
}

// TestStateRoundTrip: a kept source's state blob names its source kept:<path>
// (what an older holdfast leaves alone); read back as a kept lease's, it is
// the path again. Any other source's names the path itself.
func TestStateRoundTrip(t *testing.T) {
	for _, kept := range []bool{true, false} {
		st := SourceState{Lease: "holdfast/x", Source: "/images/app.tar", Identity: "id", Images: []Want{{Name: "a:1"}}, Kept: kept}
		data, err := EncodeState(st)
		if err != nil {
			t.Fatal(err)
		}
		if marked := strings.Contains(string(data), `"source":"kept:/images/app.tar"`); marked != kept {
			t.Errorf("kept %v: state blob %s", kept, data)
		}
		got, err := DecodeState(data, kept)
		if err != nil {
			t.Fatal(err)
		}
		if got.Source != st.Source || got.Kept != kept || !got.Complete || len(got.Images) != 1 {
			t.Errorf("kept %v: read back %+v", kept, got)
		}
	}
}

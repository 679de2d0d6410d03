package runtimetest

import (
	"context"
	"slices"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// lostBlobMissing: a blob of a kept source deleted from the content store,
// its lease notwithstanding, leaves the source complete but not intact, the
// blob named missing, in Sources and in the import store's check; the same
// identity imported again is read again and makes it intact.
func lostBlobMissing(t *testing.T, s Store, name string) {
	ctx := context.Background()
	req := runtime.ImportRequest{Source: sourcePath(name, ".tar"), Identity: "id-1", Kept: true, Open: s.Archive}
	res, err := s.Import(ctx, s.Runtime.ImportStore(), req)
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	t.Cleanup(func() { _ = s.Runtime.Release(ctx, res.Lease) })
	lost := lostCandidate(res.State, res.Images)
	if lost == "" {
		t.Fatalf("the import's state lists no blob but its images' targets: %+v", res.State)
	}
	s.DeleteBlob(t, lost)

	st, ok := stateOf(t, s.Runtime, res.Lease)
	if !ok || !st.Kept || !st.Complete || st.Intact || !slices.Equal(st.Missing, []digest.Digest{lost}) {
		t.Fatalf("after %s was deleted, Sources reports %+v (found %v); want it kept, complete, not intact, missing %s alone", lost, st, ok, lost)
	}
	if intact, err := s.Runtime.ImportStore().Intact(ctx, st); err != nil || intact {
		t.Errorf("after %s was deleted, the store's check says intact %v (%v); want not intact", lost, intact, err)
	}

	req.Prior = &st
	again, err := s.Import(ctx, s.Runtime.ImportStore(), req)
	if err != nil || again.Unchanged {
		t.Fatalf("the same identity again over a lost blob: %+v, %v; want it read again", again, err)
	}
	if st, _ := stateOf(t, s.Runtime, res.Lease); !st.Intact || len(st.Missing) > 0 {
		t.Errorf("after the import again, Sources reports %+v; want it intact", st)
	}
}

// lostCandidate is a blob of st that is no image's target (a layer or a
// config): the one a test deletes.
func lostCandidate(st runtime.SourceState, images []runtime.Want) digest.Digest {
	for _, d := range slices.Backward(st.Blobs) {
		if !slices.ContainsFunc(images, func(w runtime.Want) bool { return w.Target.Digest == d }) {
			return d
		}
	}
	return ""
}

package runtimetest

import (
	"context"
	"errors"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// absentIsNotFound: what is not there is no failure where holdfast's callers
// take it as done (Unpin, Delete, Release of what is gone, which a pass may
// ask after someone else removed it), and is told apart as not found where
// they look for it (a lease's state: runtime.ErrNotFound; a blob:
// oci.ErrNotFound, which is the same error).
func absentIsNotFound(t *testing.T, s Store, name string) {
	ctx := context.Background()
	absent := name + "-absent"
	if err := s.Runtime.Unpin(ctx, absent); err != nil {
		t.Errorf("unpin of a name with no record: %v; want nil", err)
	}
	if err := s.Runtime.Delete(ctx, absent, s.Targets[0].Digest); err != nil {
		t.Errorf("delete of a name with no record: %v; want nil", err)
	}
	lease := runtime.LeaseID(sourcePath(absent, ".tar"), "id-1")
	if err := s.Runtime.Release(ctx, lease); err != nil {
		t.Errorf("release of a lease that is not there: %v; want nil", err)
	}
	if _, ok := record(t, s.Backend, absent); ok {
		t.Errorf("Unpin, Delete or Release made a record %s", absent)
	}
	if st, ok := stateOf(t, s.Runtime, lease); ok {
		t.Errorf("Sources reports a lease nobody made: %+v", st)
	}
	store := s.Runtime.ImportStore()
	if _, err := store.ReadState(ctx, lease); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("reading the state of a lease that is not there: %v; want runtime.ErrNotFound", err)
	}
	blob := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("no such blob " + name), Size: 42}
	if has, err := store.Has(ctx, blob.Digest); has || err != nil {
		t.Errorf("Has of a blob that is not there: %v, %v; want false and no error", has, err)
	}
	if b, err := store.ReadBlob(ctx, blob); !errors.Is(err, oci.ErrNotFound) {
		t.Errorf("reading a blob that is not there: %d bytes, %v; want oci.ErrNotFound", len(b), err)
	}
}

// noCRI: where no CRI image service serves, CRIImages says runtime.ErrNoCRI
// (the agent's readiness then waits for no CRI); where one does, a name it
// does not know is unseen, with no error.
func noCRI(t *testing.T, s Store, name string) {
	ctx := context.Background()
	absent := name + "-absent"
	got, err := s.Runtime.CRIImages(ctx, []string{absent})
	if err != nil || got[absent] != (runtime.CRIImage{}) {
		t.Errorf("the CRI asked about a name it does not know: %+v, %v; want it unseen and no error", got, err)
	}
	if _, err := s.NoCRI(t).CRIImages(ctx, []string{absent}); !errors.Is(err, runtime.ErrNoCRI) {
		t.Errorf("CRIImages where no CRI serves: %v; want runtime.ErrNoCRI", err)
	}
}

package importer_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/importer"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
)

// archiveOf is an OCI archive of imgs, as an import request opens it.
func archiveOf(t *testing.T, imgs ...*fixture.Image) func() (io.ReadCloser, error) {
	t.Helper()
	var buf bytes.Buffer
	if err := fixture.WriteOCI(context.Background(), &buf, fixture.OCIOptions{Names: fixture.NameContainerd}, imgs...); err != nil {
		t.Fatal(err)
	}
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil }
}

func image(t *testing.T, name string, seed int64) *fixture.Image {
	t.Helper()
	img, err := fixture.Build(context.Background(), fixture.ImageSpec{Names: []string{name}, Layers: fixture.UniformLayers(2, 32<<10, false, seed)})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// The tests run the real import over the fake's in-memory store
// (fake.Runtime.ImportStore).

// TestImportLeasesAndRecords: an import stores every host blob, holds all of
// them and its state on the source's lease, names each image and its
// repo@digest, writes documents children first, syncs once, and a second
// import at the same identity reads nothing.
func TestImportLeasesAndRecords(t *testing.T) {
	ctx := context.Background()
	rt := fake.New()
	s := rt.ImportStore()
	img := image(t, "example.com/team/app:1", 1)
	req := runtime.ImportRequest{Source: "/images/app.tar", Identity: "id-1", Open: archiveOf(t, img)}
	res, err := importer.Import(ctx, s, req)
	if err != nil {
		t.Fatal(err)
	}
	id := runtime.LeaseID(req.Source, req.Identity)
	var names []string
	for _, w := range res.Images {
		names = append(names, w.Name)
	}
	if res.Lease != id || res.Unchanged || len(names) != 2 || names[0] != "example.com/team/app:1" || !strings.HasPrefix(names[1], "example.com/team/app@sha256:") {
		t.Fatalf("result %+v (names %v)", res, names)
	}
	m := img.ManifestFor(fixture.HostPlatform())
	for _, d := range append([]digest.Digest{m.Config.Digest}, m.Layers[0].Digest(), m.Layers[1].Digest(), res.Images[0].Target.Digest) {
		if !rt.LeaseHolds(id, d) {
			t.Errorf("the lease does not hold %s", d)
		}
	}
	st, ok := rt.State(id)
	if rt.LeaseLabels(id)[runtime.LabelSource] != req.Source || !ok || !st.Complete || len(st.Images) != 2 || len(st.Blobs) == 0 {
		t.Errorf("lease labels %v, state %+v", rt.LeaseLabels(id), st)
	}
	if rt.Syncs() != 1 {
		t.Errorf("synced %d times, want once", rt.Syncs())
	}
	// The target (an index or manifest) is written last of its documents.
	if docs := rt.Docs(); docs[len(docs)-1] != res.Images[0].Target.Digest {
		t.Errorf("documents written in the order %v; the target %s must come last", docs, res.Images[0].Target.Digest)
	}

	req.Open = func() (io.ReadCloser, error) { t.Fatal("an unchanged source was opened"); return nil, nil }
	again, err := importer.Import(ctx, s, req)
	if err != nil || !again.Unchanged || len(again.Images) != 2 {
		t.Errorf("again: %+v, %v; want unchanged with the same images", again, err)
	}
}

// TestKeptImportIsMarked: a kept import's lease is the kept one, labelled
// kept with its source marked, and its state reads back as the path.
func TestKeptImportIsMarked(t *testing.T) {
	rt := fake.New()
	req := runtime.ImportRequest{Source: "/tmp/app.tar", Identity: "id", Kept: true, Open: archiveOf(t, image(t, "example.com/kept/app:1", 2))}
	res, err := importer.Import(context.Background(), rt.ImportStore(), req)
	if err != nil {
		t.Fatal(err)
	}
	id := runtime.KeptLeaseID(req.Source, req.Identity)
	labels := rt.LeaseLabels(id)
	if res.Lease != id || labels == nil {
		t.Fatalf("lease %s; want %s", res.Lease, id)
	}
	if labels[runtime.LabelKept] != "true" || labels[runtime.LabelSource] != "kept:/tmp/app.tar" || labels[runtime.LabelImportedAt] == "" {
		t.Errorf("kept lease labels %v", labels)
	}
	if st, ok := rt.State(id); !ok || st.Source != req.Source || !st.Kept {
		t.Errorf("state %+v", st)
	}
}

// TestFailedImportLeavesNoLease: an import that fails half-way (the store
// refuses a document) drops the lease it made, so nothing holds what it
// wrote; one whose lease held a complete import keeps that lease.
func TestFailedImportLeavesNoLease(t *testing.T) {
	ctx := context.Background()
	rt := fake.New()
	s := rt.ImportStore()
	rt.WriteDocErr = errors.New("the store refuses the document")
	req := runtime.ImportRequest{Source: "/images/app.tar", Identity: "id-1", Open: archiveOf(t, image(t, "example.com/fail/app:1", 3))}
	if _, err := importer.Import(ctx, s, req); err == nil || !strings.Contains(err.Error(), "refuses the document") {
		t.Fatalf("import: %v; want the document's error", err)
	}
	if n := rt.Leases(); n != 0 {
		t.Errorf("leases left: %d", n)
	}

	rt.WriteDocErr = nil
	if _, err := importer.Import(ctx, s, req); err != nil {
		t.Fatal(err)
	}
	id := runtime.LeaseID(req.Source, req.Identity)
	st, _ := rt.State(id)
	rt.DeleteBlob(st.Blobs[0]) // not intact: the next import reads the archive again
	rt.WriteDocErr = errors.New("the store refuses the document")
	if _, err := importer.Import(ctx, s, req); err == nil {
		t.Fatal("the failing import succeeded")
	}
	if _, ok := rt.State(id); !ok || rt.LeaseLabels(id) == nil {
		t.Error("the lease of the complete import is gone")
	}
}

// TestIncompleteImageFails: an image whose host-platform layer is neither
// in the archive nor in the store fails the import, naming the blob.
func TestIncompleteImageFails(t *testing.T) {
	img := image(t, "example.com/partial/app:1", 4)
	layer := img.ManifestFor(fixture.HostPlatform()).Layers[0].Digest()
	var buf bytes.Buffer
	if err := fixture.WriteOCI(context.Background(), &buf, fixture.OCIOptions{Names: fixture.NameContainerd, OmitBlobs: []digest.Digest{layer}}, img); err != nil {
		t.Fatal(err)
	}
	rt := fake.New()
	_, err := importer.Import(context.Background(), rt.ImportStore(), runtime.ImportRequest{Source: "/images/p.tar", Identity: "id",
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil }})
	if err == nil || !strings.Contains(err.Error(), layer.String()) || !strings.Contains(err.Error(), "neither in the archive nor in the store") {
		t.Errorf("import: %v; want an error naming %s", err, layer)
	}
	if n := rt.Leases(); n != 0 {
		t.Errorf("leases left: %d", n)
	}
}

// TestLeaseWantsLeavesOutIncomplete: a list's wants are leased when their
// content is in the store; one whose layer is gone is left out and reported.
func TestLeaseWantsLeavesOutIncomplete(t *testing.T) {
	ctx := context.Background()
	rt := fake.New()
	s := rt.ImportStore()
	a, b := image(t, "example.com/list/a:1", 5), image(t, "example.com/list/b:1", 6)
	res, err := importer.Import(ctx, s, runtime.ImportRequest{Source: "/images/ab.tar", Identity: "id", Open: archiveOf(t, a, b)})
	if err != nil {
		t.Fatal(err)
	}
	rt.DeleteBlob(b.ManifestFor(fixture.HostPlatform()).Layers[1].Digest())
	var wants []runtime.Want
	for _, w := range res.Images {
		if !strings.Contains(w.Name, "@") {
			wants = append(wants, w)
		}
	}
	got, err := importer.LeaseWants(ctx, s, runtime.LeaseRequest{Source: "/images/list.pins", Identity: "lid", Wants: wants})
	if err == nil || !strings.Contains(err.Error(), "example.com/list/b:1") {
		t.Errorf("LeaseWants error %v; want one naming b:1", err)
	}
	if len(got.Images) != 1 || got.Images[0].Name != "example.com/list/a:1" {
		t.Errorf("leased %+v; want a:1 only", got.Images)
	}
	if st, ok := rt.State(got.Lease); !ok || len(st.Images) != 1 {
		t.Errorf("list lease state %+v", st)
	}
}

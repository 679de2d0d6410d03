// Package importer is the import of one source (an archive or an OCI layout
// dir) into a content store, whatever the store: walk it, work out what its
// images need, check that the host platform's content is complete, write the
// documents, lease everything, and record the source's desired state on its
// lease. It owns the lease's ID and labels and the state it records
// (internal/runtime's lease.go); a backend gives it a runtime.Store and, per
// import, a runtime.Sink that writes blobs (the ports, internal/runtime's
// ports.go; containerd's adapter has two sinks: through the content API, or
// into the store's directory).
package importer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/archive"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// MaxDocSize bounds an index or manifest read back from the store (or a held
// blob) to walk an image: registries take at most 4 MiB.
const MaxDocSize = 16 << 20

// abandonTimeout bounds the clean-up of a failed or cancelled import.
const abandonTimeout = 30 * time.Second

// Import imports one source under its lease (runtime.LeaseID, or
// runtime.KeptLeaseID for a kept source). A source whose lease holds a
// complete, intact import at the same identity is unchanged: nothing is
// read. On any error nothing of the source is left but what its lease
// already held from an earlier complete import. An error that says the disk
// is full wraps runtime.ErrNoSpace.
func Import(ctx context.Context, s runtime.Store, req runtime.ImportRequest) (runtime.ImportResult, error) {
	res, err := importSource(ctx, s, req)
	return res, runtime.NoSpace(err)
}

func importSource(ctx context.Context, s runtime.Store, req runtime.ImportRequest) (runtime.ImportResult, error) {
	id := runtime.LeaseID(req.Source, req.Identity)
	if req.Kept {
		id = runtime.KeptLeaseID(req.Source, req.Identity)
		// The labels that make it kept live with the lease, so a lost data
		// dir forgets nothing; the import then fills it as any source's.
		if err := s.CreateLease(ctx, id, map[string]string{
			runtime.LabelSource:     runtime.TruncateLabel(runtime.StoredSource(req.Source, true)),
			runtime.LabelIdentity:   runtime.TruncateLabel(req.Identity),
			runtime.LabelKept:       "true",
			runtime.LabelImportedAt: time.Now().UTC().Format(time.RFC3339),
		}); err != nil {
			return runtime.ImportResult{Lease: id}, err
		}
	}
	res := runtime.ImportResult{Lease: id}
	if err := s.Prepare(ctx, req); err != nil {
		return res, err
	}
	prior, unchanged, err := openLease(ctx, s, id, req, true)
	if err != nil || unchanged {
		res.Images, res.Unchanged = prior.Images, unchanged
		if unchanged {
			res.State = prior
		}
		return res, err
	}
	sink := s.NewSink(id, req.Source)
	defer sink.Close(ctx)
	state, err := importLeased(ctx, s, sink, id, req, &res)
	if err == nil {
		err = s.Sync(ctx)
	}
	if err != nil {
		// A lease that held a complete import keeps what it held; one made
		// for this import, or left by an unfinished one, goes.
		abandon(ctx, s, sink, id, !prior.Complete)
		return res, err
	}
	res.Images, res.State = state.Images, state
	return res, nil
}

// openLease reads a source's lease at this identity. When it holds a complete
// import whose content is intact, the source is unchanged and nothing more is
// to be done; otherwise the lease is made (or kept) for a new import.
// req.Prior is the state the caller read already, if any. An archive's
// import (carried) is not unchanged while its state lacks what a newer
// import records of its signatures (their records, the peer copies) or
// keeps of its referrers.
func openLease(ctx context.Context, s runtime.Store, id string, req runtime.ImportRequest, carried bool) (runtime.SourceState, bool, error) {
	upToDate := func(st runtime.SourceState) bool {
		return (st.SignaturesRecorded || !req.Signed) && (!carried || signaturesListed(st) && signaturesNamed(st) && (st.PeerCopies || len(st.Signatures) == 0) && referrersKept(st))
	}
	var prior runtime.SourceState
	if known := req.Prior; known != nil && known.Lease == id && known.Complete {
		if prior = *known; prior.Intact && upToDate(prior) {
			return prior, true, nil
		}
	} else {
		var err error
		if prior, err = s.ReadState(ctx, id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return prior, false, err
		}
	}
	if prior.Complete && upToDate(prior) {
		if ok, err := s.Intact(ctx, prior); err != nil || ok {
			return prior, ok, err
		}
	}
	err := s.CreateLease(ctx, id, map[string]string{
		runtime.LabelSource:   runtime.TruncateLabel(req.Source),
		runtime.LabelIdentity: runtime.TruncateLabel(req.Identity),
	})
	return prior, false, err
}

// abandon removes what a failed import left: its writes in flight and, when
// the lease was made by this import, the lease and so every blob only it held.
func abandon(ctx context.Context, s runtime.Store, sink runtime.Sink, id string, dropLease bool) {
	// The import may have ended because ctx was cancelled (a shutdown): clean
	// up all the same, for a bounded time.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
	defer cancel()
	sink.Abandon(ctx)
	if dropLease {
		_ = s.DeleteLease(ctx, id)
	}
}

func importLeased(ctx context.Context, s runtime.Store, sink runtime.Sink, lease string, req runtime.ImportRequest, res *runtime.ImportResult) (runtime.SourceState, error) {
	walked, skipped, err := walkSource(ctx, sink, req, res)
	if err != nil {
		return runtime.SourceState{}, err
	}
	need, names, err := needOf(ctx, s, sink, walked)
	if err != nil {
		return runtime.SourceState{}, err
	}
	// Blobs held back are made durable together and committed now that
	// their images, so their labels, are known.
	labelled, err := sink.CommitPending(ctx, names)
	if err != nil {
		return runtime.SourceState{}, err
	}
	res.Written = sink.Stats().Written
	// Check completeness before writing anything that points at other blobs.
	toLease, err := checkComplete(ctx, s, sink, walked, need, res)
	if err != nil {
		return runtime.SourceState{}, err
	}
	res.Present += sink.Stats().Present
	docs, err := writeDocs(ctx, sink, walked, need, names, labelled, res)
	if err != nil {
		return runtime.SourceState{}, err
	}
	toLease = append(toLease, docs...)
	k := newKeeper(s, sink, walked)
	sigs, err := keepSignatures(ctx, k, walked)
	if err != nil {
		return runtime.SourceState{}, err
	}
	refs, err := keepReferrers(ctx, k, walked, need, sigs.byImage, res)
	if err != nil {
		return runtime.SourceState{}, err
	}
	toLease = append(toLease, k.toLease...)
	wants := Wants(walked.Images)
	records, err := recordSignatures(ctx, sink, wants, sigs, signatureReader(s, walked), walked.Docs)
	if err != nil {
		return runtime.SourceState{}, err
	}
	toLease = append(toLease, records.toLease...)
	if err := s.AddToLease(ctx, lease, toLease); err != nil {
		return runtime.SourceState{}, err
	}
	// Every blob is in the store now, written or found there: label each
	// with where its images come from. Blobs this import committed carry
	// their labels already.
	for d := range labelled {
		delete(names, d)
	}
	// The signatures' blobs are labelled with the records that name them.
	for d, ns := range records.names {
		for _, n := range ns {
			names.Add(n, []digest.Digest{d})
		}
	}
	if err := s.LabelSources(ctx, names); err != nil {
		return runtime.SourceState{}, err
	}
	var required []digest.Digest
	var size int64
	for _, ref := range need {
		if ref.Required {
			required = append(required, ref.Desc.Digest)
			size += ref.Desc.Size
		}
	}
	// The signatures' and the referrers' blobs are needed too: one lost
	// makes the source not intact, and the next pass imports it again.
	for _, d := range slices.Concat(sigs.blobs, records.blobs, refs.blobs) {
		if !slices.Contains(required, d) {
			required = append(required, d)
		}
	}
	state := runtime.SourceState{Lease: lease, Source: req.Source, Kept: req.Kept, Identity: req.Identity, MtimeNs: req.MtimeNs, Images: sortedWants(append(wants, records.wants...)), Blobs: required, Size: size,
		Format: res.Format, Skipped: skipped, Signatures: sigs.byImage, SignaturesRecorded: true, PeerCopies: true, Package: sigs.pkg,
		Referrers: refs.byImage, ReferrersKept: true}
	if err := sink.WriteState(ctx, state); err != nil {
		return runtime.SourceState{}, err
	}
	return written(state), nil
}

// walkSource walks the archive or the layout dir into the sink, and records
// in res what it read and what it skipped (counted by reason).
func walkSource(ctx context.Context, sink runtime.Sink, req runtime.ImportRequest, res *runtime.ImportResult) (*archive.Result, map[string]int, error) {
	walked, err := Walk(ctx, req, sink)
	var skipped map[string]int
	if walked != nil {
		res.BytesRead = walked.BytesRead
		res.Format = string(walked.Format)
		for _, e := range walked.Skipped {
			if skipped == nil {
				skipped = map[string]int{}
			}
			skipped[e.Reason]++
			res.Skipped = append(res.Skipped, strings.TrimSpace(e.Name+" "+e.Digest.String())+": "+e.Reason)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	return walked, skipped, nil
}

// needOf is everything the walked images need, parents before children, and
// the names each blob is needed by.
func needOf(ctx context.Context, s runtime.Store, sink runtime.Sink, walked *archive.Result) ([]oci.BlobRef, runtime.Names, error) {
	read := oci.ReaderFunc(func(ctx context.Context, desc ocispec.Descriptor) ([]byte, error) {
		if b, ok := walked.Docs[desc.Digest]; ok {
			return b, nil
		}
		if desc.Size > MaxDocSize {
			return nil, fmt.Errorf("%s %s: %d bytes is too large for an image document (at most %d)", oci.Kind(desc.MediaType), desc.Digest, desc.Size, MaxDocSize)
		}
		if b, ok, err := sink.ReadPending(desc.Digest); ok || err != nil {
			return b, err
		}
		return s.ReadBlob(ctx, desc)
	})
	var need []oci.BlobRef
	index := map[digest.Digest]int{}
	names := runtime.Names{}
	for _, img := range walked.Images {
		refs, err := oci.Closure(ctx, img.Target, read, s.Platform())
		if err != nil {
			return nil, nil, fmt.Errorf("image %s: %w", img.Name, err)
		}
		names.Add(img.Name, oci.Digests(refs))
		for _, ref := range refs {
			if i, ok := index[ref.Desc.Digest]; ok {
				need[i].Required = need[i].Required || ref.Required
				continue
			}
			index[ref.Desc.Digest] = len(need)
			need = append(need, ref)
		}
	}
	return need, names, nil
}

// checkComplete makes sure every required blob is in the archive or in the
// store, and returns those the lease must take beyond what the sink
// committed under it: walked blobs it did not commit, and blobs found present.
func checkComplete(ctx context.Context, s runtime.Store, sink runtime.Sink, walked *archive.Result, need []oci.BlobRef, res *runtime.ImportResult) ([]digest.Digest, error) {
	var toLease []digest.Digest
	for _, ref := range need {
		d := ref.Desc.Digest
		if _, ok := walked.Docs[d]; ok {
			continue
		}
		if _, ok := walked.Blobs[d]; ok {
			if !sink.Committed(d) {
				toLease = append(toLease, d)
			}
			continue
		}
		has, err := s.Has(ctx, d)
		if err != nil {
			return nil, fmt.Errorf("checking blob %s: %w", d, err)
		}
		if has {
			res.Present++
			toLease = append(toLease, d)
			continue
		}
		if ref.Required {
			return nil, fmt.Errorf("%s %s %s is neither in the archive nor in the store", s.Platform(), oci.Kind(ref.Desc.MediaType), d)
		}
	}
	return toLease, nil
}

// writeDocs writes the documents, children first: a document commits only
// once what it names is there. It returns the documents that were there
// already, for the lease to take.
func writeDocs(ctx context.Context, sink runtime.Sink, walked *archive.Result, need []oci.BlobRef, names runtime.Names, labelled map[digest.Digest]bool, res *runtime.ImportResult) ([]digest.Digest, error) {
	var present []digest.Digest
	for i := len(need) - 1; i >= 0; i-- {
		desc := need[i].Desc
		data, ok := walked.Docs[desc.Digest]
		if !ok {
			continue
		}
		committed, err := sink.WriteDoc(ctx, desc, data, names[desc.Digest])
		if err != nil {
			return nil, err
		}
		if committed {
			res.Written++
			labelled[desc.Digest] = true
		} else {
			present = append(present, desc.Digest)
		}
	}
	return present, nil
}

// written is st as Sources reads it once its blob is stored: complete, with
// all its content.
func written(st runtime.SourceState) runtime.SourceState {
	st.Complete, st.Intact, st.CreatedAt = true, true, time.Now()
	return st
}

// LeaseWants leases the content of images already in the store for a source
// that names images rather than holding them (a pin list), and records the
// source's desired state. Wants whose host-platform content is not complete
// are left out and reported; the others are leased.
func LeaseWants(ctx context.Context, s runtime.Store, req runtime.LeaseRequest) (runtime.ImportResult, error) {
	id := runtime.LeaseID(req.Source, req.Identity)
	res := runtime.ImportResult{Lease: id}
	prior, unchanged, err := openLease(ctx, s, id, runtime.ImportRequest{Source: req.Source, Identity: req.Identity}, false)
	if err != nil || unchanged {
		res.Images, res.Unchanged = prior.Images, unchanged
		if unchanged {
			res.State = prior
		}
		return res, err
	}
	var (
		blobs    []digest.Digest
		required []digest.Digest
		kept     []runtime.Want
		errs     []error
		sigs     map[digest.Digest][]ocispec.Descriptor
	)
	for _, w := range req.Wants {
		refs, err := oci.Closure(ctx, w.Target, s, s.Platform())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", w.Name, err))
			continue
		}
		var have, need []digest.Digest
		complete := true
		for _, ref := range refs {
			if ref.Required {
				need = append(need, ref.Desc.Digest)
			}
			if ok, _ := s.Has(ctx, ref.Desc.Digest); ok {
				have = append(have, ref.Desc.Digest)
			} else if ref.Required {
				errs = append(errs, fmt.Errorf("%s: %s %s is not in the store", w.Name, oci.Kind(ref.Desc.MediaType), ref.Desc.Digest))
				complete = false
				break
			}
		}
		if complete {
			blobs = append(blobs, have...)
			required = append(required, need...)
			kept = append(kept, w)
			blobs = append(blobs, signatureBlobs(ctx, s, w)...)
			if len(w.Signatures) > 0 {
				if sigs == nil {
					sigs = map[digest.Digest][]ocispec.Descriptor{}
				}
				sigs[w.Target.Digest] = append(sigs[w.Target.Digest], w.Signatures...)
			}
		}
	}
	if err := s.AddToLease(ctx, id, blobs); err != nil {
		return res, err
	}
	sink := s.NewSink(id, req.Source)
	defer sink.Close(ctx)
	slices.Sort(required)
	st := runtime.SourceState{Lease: id, Source: req.Source, Identity: req.Identity, MtimeNs: req.MtimeNs, Images: kept, Blobs: slices.Compact(required),
		Signatures: sigs, SignaturesRecorded: true}
	if err := sink.WriteState(ctx, st); err != nil {
		abandon(ctx, s, sink, id, !prior.Complete)
		return res, err
	}
	res.Images, res.State = kept, written(st)
	return res, errors.Join(errs...)
}

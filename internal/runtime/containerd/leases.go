package containerd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// stateMediaType is the media type of the blob that keeps a source's desired state.
const stateMediaType = "application/vnd.holdfast.source-state.v1+json"

// LeaseID names the lease of one source at one identity: readable, stable for
// the same path and content, and new when the archive is replaced.
func LeaseID(source, identity string) string {
	base := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, filepath.Base(source))
	if len(base) > 48 {
		base = base[:48]
	}
	return fmt.Sprintf("%s%s-%s-%s", runtime.LeasePrefix, base, shortHash(source, 6), shortHash(identity, 4))
}

func shortHash(s string, n int) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:n])
}

// truncateLabel keeps a label value within containerd's 4 KiB label limit.
func truncateLabel(v string) string {
	if len(v) > 3072 {
		return v[:3072]
	}
	return v
}

// holdfastLeases lists holdfast's leases by ID.
func (r *Runtime) holdfastLeases(ctx context.Context) (map[string]leases.Lease, error) {
	all, err := r.client.LeasesService().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing leases: %w", err)
	}
	out := map[string]leases.Lease{}
	for _, l := range all {
		if strings.HasPrefix(l.ID, runtime.LeasePrefix) {
			out[l.ID] = l
		}
	}
	return out, nil
}

// stateBlobs finds the desired-state blobs, by lease ID.
func (r *Runtime) stateBlobs(ctx context.Context, leaseID string) (map[string]content.Info, error) {
	filter := fmt.Sprintf(`labels.%q`, runtime.LabelState)
	if leaseID != "" {
		filter = fmt.Sprintf(`labels.%q==%s`, runtime.LabelState, strconv.Quote(leaseID))
	}
	out := map[string]content.Info{}
	err := r.client.ContentStore().Walk(ctx, func(info content.Info) error {
		id := info.Labels[runtime.LabelState]
		if prev, ok := out[id]; !ok || info.CreatedAt.After(prev.CreatedAt) {
			out[id] = info
		}
		return nil
	}, filter)
	if err != nil {
		return nil, fmt.Errorf("listing holdfast state: %w", err)
	}
	return out, nil
}

// readState reads one lease's desired state. A lease without a state blob is
// an unfinished import: Complete is false.
func (r *Runtime) readState(ctx context.Context, id string) (runtime.SourceState, error) {
	ls, err := r.holdfastLeases(ctx)
	if err != nil {
		return runtime.SourceState{}, err
	}
	l, ok := ls[id]
	if !ok {
		return runtime.SourceState{Lease: id}, fmt.Errorf("lease %s: %w", id, runtime.ErrNotFound)
	}
	blobs, err := r.stateBlobs(ctx, id)
	if err != nil {
		return runtime.SourceState{}, err
	}
	return r.loadState(ctx, l, blobs)
}

func (r *Runtime) loadState(ctx context.Context, l leases.Lease, blobs map[string]content.Info) (runtime.SourceState, error) {
	st := runtime.SourceState{
		Lease:     l.ID,
		Source:    l.Labels[runtime.LabelSource],
		Identity:  l.Labels[runtime.LabelIdentity],
		CreatedAt: l.CreatedAt,
	}
	info, ok := blobs[l.ID]
	if !ok {
		return st, nil
	}
	data, err := content.ReadBlob(ctx, r.client.ContentStore(), ocispec.Descriptor{Digest: info.Digest, Size: info.Size})
	if err != nil {
		if errdefs.IsNotFound(err) {
			return st, nil
		}
		return st, fmt.Errorf("reading state of lease %s: %w", l.ID, err)
	}
	var saved runtime.SourceState
	if err := json.Unmarshal(data, &saved); err != nil {
		return st, fmt.Errorf("reading state of lease %s: %w", l.ID, err)
	}
	st.Source, st.Identity, st.MtimeNs, st.Images, st.Complete = saved.Source, saved.Identity, saved.MtimeNs, saved.Images, true
	return st, nil
}

// Sources lists the desired state of every holdfast lease.
func (r *Runtime) Sources(ctx context.Context) ([]runtime.SourceState, error) {
	ctx = r.ns(ctx)
	ls, err := r.holdfastLeases(ctx)
	if err != nil {
		return nil, err
	}
	blobs, err := r.stateBlobs(ctx, "")
	if err != nil {
		return nil, err
	}
	out := make([]runtime.SourceState, 0, len(ls))
	for _, l := range ls {
		st, err := r.loadState(ctx, l, blobs)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Lease < out[j].Lease })
	return out, nil
}

// writeState stores the desired state in a blob the lease holds.
func (r *Runtime) writeState(ctx context.Context, ing *ingester, st runtime.SourceState) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	desc := ocispec.Descriptor{MediaType: stateMediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}
	committed, err := ing.writeDoc(ctx, desc, data, map[string]string{runtime.LabelState: st.Lease})
	if err != nil {
		return fmt.Errorf("saving state of lease %s: %w", st.Lease, err)
	}
	if !committed {
		return r.addToLease(ctx, []digest.Digest{desc.Digest})
	}
	return nil
}

// Intact reports whether every required blob of a source's images is in the store.
func (r *Runtime) Intact(ctx context.Context, st runtime.SourceState) (bool, error) {
	return r.intact(r.ns(ctx), st)
}

func (r *Runtime) intact(ctx context.Context, st runtime.SourceState) (bool, error) {
	cs := r.client.ContentStore()
	if len(st.Blobs) > 0 {
		for _, d := range st.Blobs {
			if _, err := cs.Info(ctx, d); err != nil {
				if errdefs.IsNotFound(err) {
					return false, nil
				}
				return false, err
			}
		}
		return true, nil
	}
	read := func(ctx context.Context, desc ocispec.Descriptor) ([]byte, error) {
		return content.ReadBlob(ctx, cs, desc)
	}
	checked := map[digest.Digest]bool{}
	for _, w := range st.Images {
		if checked[w.Target.Digest] {
			continue
		}
		checked[w.Target.Digest] = true
		refs, err := r.closure(ctx, w.Target, read)
		if err != nil {
			return false, nil
		}
		for _, ref := range refs {
			if !ref.required || isDocType(ref.desc.MediaType) {
				continue // documents were read by closure
			}
			if _, err := cs.Info(ctx, ref.desc.Digest); err != nil {
				if errdefs.IsNotFound(err) {
					return false, nil
				}
				return false, err
			}
		}
	}
	return true, nil
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// Release deletes one of holdfast's leases; what only it held is collected.
func (r *Runtime) Release(ctx context.Context, id string) error {
	if !strings.HasPrefix(id, runtime.LeasePrefix) {
		return fmt.Errorf("lease %s is not holdfast's", id)
	}
	if err := r.client.LeasesService().Delete(r.ns(ctx), leases.Lease{ID: id}); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("releasing lease %s: %w", id, err)
	}
	return nil
}

// LeaseWants leases the content of images already in the store for a source
// that names images rather than holding them (a pin list), and saves the
// source's desired state. Wants whose host-platform content is not complete
// are left out and reported; the others are leased.
func (r *Runtime) LeaseWants(ctx context.Context, req runtime.LeaseRequest) (runtime.ImportResult, error) {
	ctx = r.ns(ctx)
	id := LeaseID(req.Source, req.Identity)
	res := runtime.ImportResult{Lease: id}
	prior, unchanged, err := r.openLease(ctx, id, req.Source, req.Identity, nil)
	if err != nil || unchanged {
		res.Images, res.Unchanged = prior.Images, unchanged
		return res, err
	}
	lctx := leases.WithLease(ctx, id)
	cs := r.client.ContentStore()
	read := func(ctx context.Context, desc ocispec.Descriptor) ([]byte, error) {
		return content.ReadBlob(ctx, cs, desc)
	}
	var (
		blobs    []digest.Digest
		required []digest.Digest
		kept     []runtime.Want
		errs     []error
	)
	for _, w := range req.Wants {
		refs, err := r.closure(ctx, w.Target, read)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", w.Name, err))
			continue
		}
		var have, need []digest.Digest
		complete := true
		for _, ref := range refs {
			if ref.required {
				need = append(need, ref.desc.Digest)
			}
			if _, err := cs.Info(ctx, ref.desc.Digest); err == nil {
				have = append(have, ref.desc.Digest)
			} else if ref.required {
				errs = append(errs, fmt.Errorf("%s: %s %s is not in the store", w.Name, kind(ref.desc.MediaType), ref.desc.Digest))
				complete = false
				break
			}
		}
		if complete {
			blobs = append(blobs, have...)
			required = append(required, need...)
			kept = append(kept, w)
		}
	}
	if err := r.addToLease(lctx, blobs); err != nil {
		return res, err
	}
	ing := r.newIngester()
	slices.Sort(required)
	st := runtime.SourceState{Lease: id, Source: req.Source, Identity: req.Identity, MtimeNs: req.MtimeNs, Images: kept, Blobs: slices.Compact(required)}
	if err := r.writeState(lctx, ing, st); err != nil {
		r.abandon(ctx, id, !prior.Complete, ing)
		return res, err
	}
	res.Images = kept
	return res, errors.Join(errs...)
}

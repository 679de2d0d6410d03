package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	contentapi "github.com/containerd/containerd/api/services/content/v1"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// holdfastLeases lists holdfast's leases by ID, those of content-root probes
// (runtime.LabelProbe) left out: they hold no source.
func (r *Runtime) holdfastLeases(ctx context.Context) (map[string]leases.Lease, error) {
	all, err := r.client.LeasesService().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing leases: %w", err)
	}
	out := map[string]leases.Lease{}
	for _, l := range all {
		if strings.HasPrefix(l.ID, runtime.LeasePrefix) && l.Labels[runtime.LabelProbe] == "" {
			out[l.ID] = l
		}
	}
	return out, nil
}

// walkStates finds the desired-state blobs by lease ID: one lease's with
// leaseID, else all of them. With present it walks the whole store once and
// notes every digest in it.
func (r *Runtime) walkStates(ctx context.Context, leaseID string, present map[digest.Digest]bool) (map[string]content.Info, error) {
	var filters []string
	switch {
	case leaseID != "":
		filters = append(filters, fmt.Sprintf(`labels.%q==%s`, runtime.LabelState, strconv.Quote(leaseID)))
	case present == nil:
		filters = append(filters, fmt.Sprintf(`labels.%q`, runtime.LabelState))
	}
	out := map[string]content.Info{}
	err := r.client.ContentStore().Walk(ctx, func(info content.Info) error {
		if present != nil {
			present[info.Digest] = true
		}
		id, ok := info.Labels[runtime.LabelState]
		if !ok {
			return nil
		}
		if prev, ok := out[id]; !ok || info.CreatedAt.After(prev.CreatedAt) {
			out[id] = info
		}
		return nil
	}, filters...)
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
	blobs, err := r.walkStates(ctx, id, nil)
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
	readKept(l, &st)
	info, ok := blobs[l.ID]
	if !ok {
		return st, nil
	}
	data := r.states.get(info.Digest)
	if data == nil {
		var err error
		if data, err = r.readSmall(ctx, info); err != nil {
			if errdefs.IsNotFound(err) {
				return st, nil
			}
			return st, fmt.Errorf("reading state of lease %s: %w", l.ID, err)
		}
		r.states.put(info.Digest, data)
	}
	saved, err := runtime.DecodeState(data, st.Kept)
	if err != nil {
		return st, fmt.Errorf("reading state of lease %s: %w", l.ID, err)
	}
	st.Source, st.Identity, st.MtimeNs, st.Images, st.Blobs, st.Size, st.Complete = saved.Source, saved.Identity, saved.MtimeNs, saved.Images, saved.Blobs, saved.Size, true
	st.Format, st.Skipped = saved.Format, saved.Skipped
	st.Signatures, st.SignaturesRecorded, st.Package = saved.Signatures, saved.SignaturesRecorded, saved.Package
	st.PeerCopies, st.Referrers, st.ReferrersKept = saved.PeerCopies, saved.Referrers, saved.ReferrersKept
	return st, nil
}

// readSmall reads a small blob whose size the caller knows in one call
// (content.ReadBlob asks the store for its Info first).
func (r *Runtime) readSmall(ctx context.Context, info content.Info) ([]byte, error) {
	stream, err := r.content.Read(ctx, &contentapi.ReadContentRequest{Digest: info.Digest.String()})
	if err != nil {
		return nil, errgrpc.ToNative(err)
	}
	data := make([]byte, 0, info.Size)
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, errgrpc.ToNative(err)
		}
		data = append(data, resp.Data...)
	}
	if int64(len(data)) != info.Size {
		return nil, fmt.Errorf("blob %s: read %d of %d bytes", info.Digest, len(data), info.Size)
	}
	return data, nil
}

// Sources lists the desired state of every holdfast lease, and whether its
// content is intact, from one walk of the store and one read per lease.
func (r *Runtime) Sources(ctx context.Context) ([]runtime.SourceState, error) {
	ctx = r.ns(ctx)
	var (
		ls      map[string]leases.Lease
		lerr    error
		present = map[digest.Digest]bool{}
	)
	listed := make(chan struct{})
	go func() {
		defer close(listed)
		ls, lerr = r.holdfastLeases(ctx)
	}()
	blobs, err := r.walkStates(ctx, "", present)
	<-listed
	if err = errors.Join(lerr, err); err != nil {
		return nil, err
	}
	out := make([]runtime.SourceState, 0, len(ls))
	for _, l := range ls {
		out = append(out, runtime.SourceState{Lease: l.ID})
	}
	files := r.blobFilesOf(ctx, blobs)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range out {
		g.Go(func() error {
			st, err := r.loadState(gctx, ls[out[i].Lease], blobs)
			if err == nil && st.Complete {
				if len(st.Blobs) > 0 {
					for _, d := range st.Blobs {
						if present[d] && files.missing(d) {
							r.lost.add(d)
							st.Missing = append(st.Missing, d)
						} else if !present[d] {
							st.Missing = append(st.Missing, d)
						}
					}
					st.Intact = len(st.Missing) == 0
				} else {
					st.Intact, err = r.intact(gctx, st) // a state saved without its blob list
				}
			}
			out[i] = st
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	keep := map[digest.Digest]bool{}
	for _, info := range blobs {
		keep[info.Digest] = true
	}
	r.states.prune(keep)
	sort.Slice(out, func(i, j int) bool { return out[i].Lease < out[j].Lease })
	return out, nil
}

// writeState stores the desired state in a blob the lease holds.
func (r *Runtime) writeState(ctx context.Context, ing *ingester, st runtime.SourceState) error {
	data, err := runtime.EncodeState(st)
	if err != nil {
		return err
	}
	desc := ocispec.Descriptor{MediaType: runtime.StateMediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}
	committed, err := ing.writeDoc(ctx, desc, data, map[string]string{runtime.LabelState: st.Lease, localSource: "state"}, nil)
	if err != nil {
		return fmt.Errorf("saving state of lease %s: %w", st.Lease, err)
	}
	if !committed {
		return r.addToLease(ctx, []digest.Digest{desc.Digest})
	}
	return nil
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
	checked := map[digest.Digest]bool{}
	for _, w := range st.Images {
		if checked[w.Target.Digest] {
			continue
		}
		checked[w.Target.Digest] = true
		refs, err := r.closure(ctx, w.Target)
		if err != nil {
			return false, nil
		}
		for _, ref := range refs {
			if !ref.Required || oci.IsDoc(ref.Desc.MediaType) {
				continue // documents were read by closure
			}
			if _, err := cs.Info(ctx, ref.Desc.Digest); err != nil {
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

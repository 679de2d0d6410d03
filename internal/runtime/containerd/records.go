package containerd

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// Pin makes the record name point at target with both pin labels. A new record
// is created with them; an existing one is updated field by field, so labels
// set by others (the CRI's, a user's) stay. On a first pin, a CRI pin that was
// there before holdfast's is remembered on the record, so unpinning leaves it;
// a heal never remembers one (the CRI pin it finds is holdfast's own). The
// pinned record is held by holdfast's lease of records, so that an expiry
// set on it by another writer never makes containerd collect it (expiry.go).
func (r *Runtime) Pin(ctx context.Context, w runtime.Want, opts ...runtime.PinOption) (runtime.PinResult, error) {
	ctx = r.ns(ctx)
	first := runtime.ApplyPinOptions(opts).First
	is := r.client.ImageService()
	for attempt := 0; attempt < 3; attempt++ {
		img, err := is.Get(ctx, w.Name)
		if errdefs.IsNotFound(err) {
			img, err = is.Create(ctx, images.Image{
				Name:   w.Name,
				Target: w.Target,
				Labels: map[string]string{
					runtime.LabelCRIPinned: runtime.PinnedValue,
					runtime.LabelPinned:    runtime.PinnedValue,
					runtime.LabelCreated:   "true",
				},
			})
			if errdefs.IsAlreadyExists(err) {
				continue // created meanwhile: update it
			}
			if err != nil {
				return runtime.PinResult{}, fmt.Errorf("creating record %s: %w", w.Name, err)
			}
			return runtime.PinResult{Created: true}, r.holdPinned(ctx, img, true)
		}
		if err != nil {
			return runtime.PinResult{}, fmt.Errorf("reading record %s: %w", w.Name, err)
		}
		var res runtime.PinResult
		var paths []string
		if img.Target.Digest != w.Target.Digest || img.Target.MediaType != w.Target.MediaType || img.Target.Size != w.Target.Size {
			img.Target = w.Target
			paths = append(paths, "target")
			res.Retargeted = true
		}
		if img.Labels == nil {
			img.Labels = map[string]string{}
		}
		if img.Labels[runtime.LabelPinned] != runtime.PinnedValue {
			if first && img.Labels[runtime.LabelCRIPinned] == runtime.PinnedValue {
				img.Labels[runtime.LabelPriorPin] = "true"
				paths = append(paths, "labels."+runtime.LabelPriorPin)
			}
			img.Labels[runtime.LabelPinned] = runtime.PinnedValue
			paths = append(paths, "labels."+runtime.LabelPinned)
		}
		if img.Labels[runtime.LabelCRIPinned] != runtime.PinnedValue {
			img.Labels[runtime.LabelCRIPinned] = runtime.PinnedValue
			paths = append(paths, "labels."+runtime.LabelCRIPinned)
		}
		res.Labelled = len(paths) > 0 && !res.Retargeted || len(paths) > 1
		if len(paths) == 0 {
			return res, r.holdPinned(ctx, img, false)
		}
		updated, err := is.Update(ctx, img, paths...)
		if err != nil {
			if errdefs.IsNotFound(err) {
				continue // deleted meanwhile: create it
			}
			return runtime.PinResult{}, fmt.Errorf("updating record %s: %w", w.Name, err)
		}
		return res, r.holdPinned(ctx, updated, true)
	}
	return runtime.PinResult{}, fmt.Errorf("record %s keeps changing under holdfast", w.Name)
}

// Unpin removes holdfast's pin from a record it owns: its own label, and the
// CRI's unless a user's pin was there first. Records holdfast does not own are
// left alone. The record itself stays; the kubelet's GC decides its fate,
// and an expiry on it is no longer outlived (expiry.go).
func (r *Runtime) Unpin(ctx context.Context, name string) error {
	ctx = r.ns(ctx)
	is := r.client.ImageService()
	img, found, err := r.record(ctx, name)
	if err != nil || !found {
		return err
	}
	if img.Labels[runtime.LabelPinned] != runtime.PinnedValue {
		return nil
	}
	paths := []string{"labels." + runtime.LabelPinned}
	delete(img.Labels, runtime.LabelPinned)
	if img.Labels[runtime.LabelPriorPin] == "true" {
		delete(img.Labels, runtime.LabelPriorPin)
		paths = append(paths, "labels."+runtime.LabelPriorPin)
	} else if _, ok := img.Labels[runtime.LabelCRIPinned]; ok {
		delete(img.Labels, runtime.LabelCRIPinned)
		paths = append(paths, "labels."+runtime.LabelCRIPinned)
	}
	if _, err := is.Update(ctx, img, paths...); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("unpinning %s: %w", name, err)
	}
	return r.unhold(ctx, name)
}

// Records lists every record in the namespace.
func (r *Runtime) Records(ctx context.Context) ([]runtime.Image, error) {
	recs, err := r.client.ImageService().List(r.ns(ctx))
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	out := make([]runtime.Image, 0, len(recs))
	for _, rec := range recs {
		out = append(out, runtime.Image{Name: rec.Name, Target: rec.Target, Labels: rec.Labels})
	}
	return out, nil
}

// Delete deletes the record name if holdfast made it (runtime.LabelCreated)
// and it still points at target. A record someone else made, or re-pointed
// meanwhile, stays.
func (r *Runtime) Delete(ctx context.Context, name string, target digest.Digest) error {
	ctx = r.ns(ctx)
	is := r.client.ImageService()
	img, found, err := r.record(ctx, name)
	if err != nil || !found {
		return err
	}
	if img.Labels[runtime.LabelCreated] != "true" || img.Target.Digest != target {
		return nil
	}
	if err := is.Delete(ctx, name, images.DeleteTarget(&img.Target)); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("deleting record %s: %w", name, err)
	}
	return r.unhold(ctx, name)
}

// record reads the record name (ctx carries the namespace); found is false
// when there is none.
func (r *Runtime) record(ctx context.Context, name string) (img images.Image, found bool, err error) {
	img, err = r.client.ImageService().Get(ctx, name)
	if errdefs.IsNotFound(err) {
		return img, false, nil
	}
	if err != nil {
		return img, false, fmt.Errorf("reading record %s: %w", name, err)
	}
	return img, true, nil
}

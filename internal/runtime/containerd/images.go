package containerd

import (
	"context"
	"fmt"
	"sort"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// Images lists the records of the namespace, without the CRI's own sha256:
// records, with each one's config digest (the CRI image ID) and the size of its
// host-platform content. Content that is missing leaves those fields empty.
func (r *Runtime) Images(ctx context.Context) ([]runtime.ImageDetail, error) {
	ctx = r.ns(ctx)
	recs, err := r.client.ImageService().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	type detail struct {
		config digest.Digest
		size   int64
	}
	cache := map[digest.Digest]detail{}
	var out []runtime.ImageDetail
	for _, rec := range recs {
		if runtime.IsCRIRecord(rec.Name) {
			continue
		}
		d, ok := cache[rec.Target.Digest]
		if !ok {
			if refs, err := r.closure(ctx, rec.Target); err == nil {
				for _, ref := range refs {
					if !ref.Required {
						continue
					}
					d.size += ref.Desc.Size
					if images.IsConfigType(ref.Desc.MediaType) {
						d.config = ref.Desc.Digest
					}
				}
			}
			cache[rec.Target.Digest] = d
		}
		out = append(out, runtime.ImageDetail{
			Image:        runtime.Image{Name: rec.Name, Target: rec.Target, Labels: rec.Labels},
			ConfigDigest: d.config,
			Size:         d.size,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

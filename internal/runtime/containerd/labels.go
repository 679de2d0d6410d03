package containerd

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/labels"
	"github.com/containerd/containerd/v2/pkg/reference"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// localSource is the distribution source label of the blobs holdfast
// writes that are no image's: a lease's desired state, a probe of the
// content store's directory. A registry mirror that shares content between
// nodes (spegel) reads the labels of every blob containerd commits and logs
// an error for one without a distribution source; these say they come from a
// host under .invalid, which no name resolves to, so no pull is ever sent
// there and no image is named by it. The mirror may still list their
// digests: a peer that asks for exactly such a digest gets the node's state
// of one source (paths, names and digests: what the node's NodeImages says).
const localSource = labels.LabelDistributionSource + ".holdfast.invalid"

// distributionSource is where an image name says its content comes from: the
// label key for the registry host (containerd.io/distribution.source.<host>)
// and the repository path. K3s's embedded registry mirror (spegel) serves to
// other nodes only content that carries such a label, as containerd's own
// pulls write it. The host is written as containerd's pulls write it, without
// a port, so that the labels of a pull and of an import of the same image are
// one label.
func distributionSource(name string) (key, repo string, ok bool) {
	spec, err := reference.Parse(name)
	if err != nil {
		return "", "", false
	}
	host, repo, found := strings.Cut(spec.Locator, "/")
	if !found || repo == "" {
		return "", "", false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "" {
		return "", "", false
	}
	return labels.LabelDistributionSource + "." + host, repo, true
}

// mergeRepos adds repos to a label value: a comma-separated list of
// repositories, sorted, each once, as containerd keeps it.
func mergeRepos(value string, repos ...string) string {
	var all []string
	for _, r := range append(strings.Split(value, ","), repos...) {
		if r != "" {
			all = append(all, r)
		}
	}
	sort.Strings(all)
	return strings.Join(slices.Compact(all), ",")
}

// sourceLabels maps each blob to the distribution source labels it needs: by
// label key, the repositories of the images that hold it.
type sourceLabels map[digest.Digest]map[string][]string

// add records that every blob in ds belongs to the image called name.
func (s sourceLabels) add(name string, ds []digest.Digest) {
	key, repo, ok := distributionSource(name)
	if !ok {
		return
	}
	for _, d := range ds {
		if s[d] == nil {
			s[d] = map[string][]string{}
		}
		s[d][key] = append(s[d][key], repo)
	}
}

// labelsOf is the distribution source labels of a blob no other image has
// labelled yet: each repository list as it would be merged into no value.
// Values past containerd's label size limit are left out, as labelSources
// leaves them.
func (s sourceLabels) labelsOf(d digest.Digest) map[string]string {
	out := map[string]string{}
	for key, repos := range s[d] {
		if v := mergeRepos("", repos...); labels.Validate(key, v) == nil {
			out[key] = v
		}
	}
	return out
}

// labelSources merges the distribution source labels into the blobs in the
// store, key by key (labels.<key> field paths): other labels are never
// touched, and repositories already in a value stay. Blobs the store does not
// have (another platform's, left out of a partial archive) are skipped. A
// value grown past containerd's label size limit is left as it is, as
// containerd's pulls do.
func (r *Runtime) labelSources(ctx context.Context, want sourceLabels) error {
	cs := r.client.ContentStore()
	// Imports run in parallel and may share blobs: one merge at a time, so
	// that no import overwrites what another just added.
	r.labelMu.Lock()
	defer r.labelMu.Unlock()
	for d, keys := range want {
		info, err := cs.Info(ctx, d)
		if errdefs.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading labels of %s: %w", d, err)
		}
		update := content.Info{Digest: d, Labels: map[string]string{}}
		var paths []string
		for key, repos := range keys {
			old := info.Labels[key]
			v := mergeRepos(old, repos...)
			if v == old || labels.Validate(key, v) != nil {
				continue
			}
			update.Labels[key] = v
			paths = append(paths, "labels."+key)
		}
		if len(paths) == 0 {
			continue
		}
		if _, err := cs.Update(ctx, update, paths...); err != nil {
			return fmt.Errorf("labelling %s with its distribution source: %w", d, err)
		}
	}
	return nil
}

// sourceLabelsOf is the distribution source labels the blobs need, from the
// names of the images that hold each.
func sourceLabelsOf(names runtime.Names) sourceLabels {
	s := sourceLabels{}
	for d, ns := range names {
		for _, n := range ns {
			s.add(n, []digest.Digest{d})
		}
	}
	return s
}

// closure lists every blob reachable from target (oci.Closure for the
// host platform), reading its documents from the content store.
func (r *Runtime) closure(ctx context.Context, target ocispec.Descriptor) ([]oci.BlobRef, error) {
	return oci.Closure(ctx, target, oci.ReaderFunc(r.readBlob), r.platform)
}

// readBlob reads a small blob from the content store; one that is not there
// is oci.ErrNotFound (and containerd's not-found).
func (r *Runtime) readBlob(ctx context.Context, desc ocispec.Descriptor) ([]byte, error) {
	b, err := content.ReadBlob(ctx, r.client.ContentStore(), desc)
	if errdefs.IsNotFound(err) {
		return nil, oci.NotFound(err)
	}
	return b, err
}

// gcLabels are the labels a document needs so that containerd's GC keeps its
// children while anything holds the document.
func gcLabels(desc ocispec.Descriptor, data []byte) (map[string]string, error) {
	children, err := oci.Children(desc, data)
	if err != nil || len(children) == 0 {
		return nil, err
	}
	labels := map[string]string{}
	for i, c := range children {
		for _, key := range images.ChildGCLabels(c) {
			if strings.HasSuffix(key, ".") {
				key += strconv.Itoa(i)
			}
			labels[key] = c.Digest.String()
		}
	}
	return labels, nil
}

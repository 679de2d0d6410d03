// Package exporter is the export of images from a content store into one
// archive, whatever the store: choose the images (by name or pattern, by
// source, or every image holdfast pins), walk what each needs, take what the
// store holds of other platforms, find the images' signatures, and lay it
// all out as an OCI image layout with a docker save manifest.json, which
// internal/archive writes. It reads the store through the runtime's ports
// (runtime.Runtime for records and sources, the store's runtime.Content for
// blobs, the same port the import reads through) and writes nothing into it.
// It compresses what it writes itself (Compression) into its Output.
package exporter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/archive"
	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
)

// maxDocSize bounds an index or manifest read whole from the store.
const maxDocSize = 16 << 20

// Image is one name the export gives an image.
type Image struct {
	Name   string
	Target ocispec.Descriptor
}

// Plan is what an export writes: its images, the layout that holds them
// and their signatures, and what it left out.
type Plan struct {
	Images     []Image // sorted by name
	Targets    int     // distinct images (targets) among Images
	Signatures int     // signature manifests carried
	Referrers  int     // other referrers carried (SBOMs, signatures of manifests and referrers)
	Blobs      int
	Bytes      int64 // the blobs' bytes
	// LeftOut are the manifests of other platforms the export leaves out
	// because the store does not hold them whole (normal on a node, which
	// pulls or imports its own platform): "<image>: <what>".
	LeftOut []string
	// Warnings are the signatures and referrers the export leaves out
	// because the store cannot give them whole.
	Warnings []string
	// Refused are the images chosen that the selection's policy refuses,
	// by name: in Images unless the selection was SignedOnly.
	Refused []Refusal
	Layout  archive.Layout

	content runtime.Content
}

// WriteOptions tune Write.
type WriteOptions struct {
	// Read wraps each blob's stream as it is copied (a progress display).
	Read func(desc ocispec.Descriptor, r io.ReadCloser) io.ReadCloser
}

// Prepare chooses the images sel names among rt's records and sources,
// judges them by sel's policy, walks what each needs in c, and finds their
// signatures. An image whose
// host-platform content is not whole in the store is an error naming the
// image and the blob; other platforms are taken when whole, else left out
// (LeftOut).
func Prepare(ctx context.Context, rt runtime.Runtime, c runtime.Content, sel Selection) (*Plan, error) {
	records, err := rt.Records(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	states, err := rt.Sources(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing sources: %w", err)
	}
	imgs, err := choose(records, states, sel)
	if err != nil {
		return nil, err
	}
	imgs, refused, err := screen(ctx, sel, imgs, records, states)
	if err != nil {
		return nil, err
	}
	p, err := plan(ctx, c, imgs, records, states)
	if err != nil {
		return nil, err
	}
	p.Refused = refused
	return p, nil
}

// plan walks the chosen images and lays them out.
func plan(ctx context.Context, c runtime.Content, imgs []Image, records []runtime.Image, states []runtime.SourceState) (*Plan, error) {
	p := &Plan{Images: imgs, content: c}
	w := newWalker(c)
	blobs := map[digest.Digest]ocispec.Descriptor{}
	add := func(ds []ocispec.Descriptor) {
		for _, d := range ds {
			if _, ok := blobs[d.Digest]; !ok {
				blobs[d.Digest] = ocispec.Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size}
			}
		}
	}
	names := map[digest.Digest][]string{}
	var targets []ocispec.Descriptor
	for _, img := range imgs {
		if _, ok := names[img.Target.Digest]; !ok {
			targets = append(targets, img.Target)
		}
		names[img.Target.Digest] = append(names[img.Target.Digest], img.Name)
	}
	p.Targets = len(targets)
	docker := map[digest.Digest]*archive.DockerSaveEntry{} // by manifest digest
	for _, t := range targets {
		res, err := w.image(ctx, t)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", strings.Join(names[t.Digest], ", "), err)
		}
		add(res.blobs)
		for _, n := range res.left {
			p.LeftOut = append(p.LeftOut, fmt.Sprintf("%s: %s", names[t.Digest][0], n))
		}
		if res.host != nil {
			e, ok := docker[res.host.Digest]
			if !ok {
				e = &archive.DockerSaveEntry{Config: res.host.config, Layers: res.host.layers}
				docker[res.host.Digest] = e
			}
			e.RepoTags = append(e.RepoTags, repoTags(names[t.Digest])...)
		}
	}
	for _, img := range imgs {
		p.Layout.Index = append(p.Layout.Index, indexEntry(img))
	}
	sigs := findSignatures(ctx, c, targets, names, records, states)
	p.Layout.Index = append(p.Layout.Index, sigs.entries...)
	add(sigs.blobs)
	p.Signatures = sigs.manifests
	p.Warnings = sigs.notes
	held := map[digest.Digest]bool{}
	for d := range blobs {
		held[d] = true
	}
	refs := findReferrers(ctx, c, targets, names, states, held, sigs.entries)
	p.Layout.Index = append(p.Layout.Index, refs.entries...)
	add(refs.blobs)
	p.Referrers = len(refs.entries)
	p.Warnings = append(p.Warnings, refs.notes...)
	p.Layout.DockerSave = dockerSave(docker)
	for _, d := range slices.Sorted(maps.Keys(blobs)) {
		desc := blobs[d]
		p.Layout.Blobs = append(p.Layout.Blobs, archive.LayoutBlob{Desc: desc})
		p.Blobs++
		p.Bytes += desc.Size
	}
	if err := whole(ctx, w, p); err != nil {
		return nil, err
	}
	return p, nil
}

// Write writes the plan's layout to out as a tar, reading each blob from
// the store as it goes.
func (p *Plan) Write(ctx context.Context, out io.Writer, opts WriteOptions) (archive.LayoutStats, error) {
	l := p.Layout
	l.Blobs = slices.Clone(l.Blobs)
	for i := range l.Blobs {
		desc := l.Blobs[i].Desc
		l.Blobs[i].Open = func(ctx context.Context) (io.ReadCloser, error) {
			r, err := p.content.OpenBlob(ctx, desc)
			if err != nil {
				if errors.Is(err, oci.ErrNotFound) {
					return nil, fmt.Errorf("%s %s is no longer in the store: %w", oci.Kind(desc.MediaType), desc.Digest, err)
				}
				return nil, err
			}
			if opts.Read != nil {
				r = opts.Read(desc, r)
			}
			return r, nil
		}
	}
	return archive.WriteLayout(ctx, out, l)
}

// indexEntry is index.json's entry of one image name: its target, named
// as containerd's exporter names it.
func indexEntry(img Image) ocispec.Descriptor {
	return ocispec.Descriptor{
		MediaType: img.Target.MediaType,
		Digest:    img.Target.Digest,
		Size:      img.Target.Size,
		Platform:  img.Target.Platform,
		Annotations: map[string]string{
			oci.AnnotationImageName: img.Name,
			oci.AnnotationRefName:   ociRefName(img.Name),
		},
	}
}

// ociRefName is what org.opencontainers.image.ref.name says of a full name:
// its tag, as the OCI layout suggests; a name without a tag (repo@digest)
// whole, since a digest alone names nothing.
func ociRefName(name string) string {
	ref, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		return name
	}
	if t, ok := ref.(reference.Tagged); ok {
		if _, digested := ref.(reference.Digested); !digested {
			return t.Tag()
		}
	}
	return name
}

// repoTags are the names among names that docker save readers take, in the
// familiar form they write (nginx:1.25): tags only, no repo@digest.
func repoTags(names []string) []string {
	var out []string
	for _, n := range names {
		ref, err := reference.ParseNormalizedNamed(n)
		if err != nil {
			continue
		}
		if _, digested := ref.(reference.Digested); digested {
			continue
		}
		if _, tagged := ref.(reference.Tagged); !tagged {
			continue
		}
		out = append(out, reference.FamiliarString(ref))
	}
	return out
}

// dockerSave is manifest.json's entries: one per manifest, with every tag
// of the images whose host platform it is; sorted, untagged ones left out.
func dockerSave(byManifest map[digest.Digest]*archive.DockerSaveEntry) []archive.DockerSaveEntry {
	var out []archive.DockerSaveEntry
	for _, e := range byManifest {
		slices.Sort(e.RepoTags)
		e.RepoTags = slices.Compact(e.RepoTags)
		if len(e.RepoTags) > 0 {
			out = append(out, *e)
		}
	}
	slices.SortFunc(out, func(a, b archive.DockerSaveEntry) int { return strings.Compare(a.RepoTags[0], b.RepoTags[0]) })
	return out
}

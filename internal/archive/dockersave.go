package archive

// The docker save layout (manifest.json with Config, RepoTags and Layers):
// its images get an OCI manifest made here, and Docker ≥ 25's hybrid gives
// its RepoTags to the index.json entries.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// dockerImage is one entry of a docker save manifest.json.
type dockerImage struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

func (w *walker) parseManifestJSON() ([]dockerImage, error) {
	var entries []dockerImage
	if err := json.Unmarshal(w.meta[nameManifestJSON], &entries); err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	if len(entries) == 0 {
		return nil, errors.New("manifest.json lists no images")
	}
	if len(entries) > w.lim.indexItems {
		return nil, fmt.Errorf("manifest.json lists more than %d images", w.lim.indexItems)
	}
	return entries, nil
}

// repoTags normalises the RepoTags of a manifest.json entry.
func repoTags(e dockerImage) ([]string, error) {
	var names []string
	for _, t := range e.RepoTags {
		n, err := normalizeName(t)
		if err != nil {
			return nil, fmt.Errorf("manifest.json: RepoTag %q: %w", t, err)
		}
		names = addName(names, n)
	}
	return names, nil
}

// attachRepoTags gives the RepoTags of a Docker ≥ 25 manifest.json to the
// index.json entries whose manifests have the entry's config. An entry that
// matches none is taken as a docker save image. A RepoTag index.json gives
// already is not given again: manifest.json names an image by its host
// platform's config, which an index and a manifest of that platform share,
// and the name belongs to the entry index.json gives it to.
func (w *walker) attachRepoTags(ctx context.Context, targets []*target) ([]*target, error) {
	entries, err := w.parseManifestJSON()
	if err != nil {
		return nil, err
	}
	indexed := map[string]bool{}
	for i, t := range targets {
		t.noName += ", no RepoTags in manifest.json"
		targets[i] = t
		for _, n := range t.names {
			indexed[n] = true
		}
	}
	for _, e := range entries {
		fi := w.lookup(e.Config)
		if fi == nil {
			return nil, fmt.Errorf("manifest.json: config %q is not in the archive", e.Config)
		}
		names, err := repoTags(e)
		if err != nil {
			return nil, err
		}
		if len(names) > 0 {
			names = slices.DeleteFunc(names, func(n string) bool { return indexed[n] })
			if len(names) == 0 {
				continue
			}
		}
		matched := false
		for _, t := range targets {
			if t.configs[fi.dgst] {
				matched = true
				for _, n := range names {
					t.names = addName(t.names, n)
				}
			}
		}
		if !matched {
			t, err := w.synthesize(ctx, e)
			if err != nil {
				return nil, err
			}
			targets = append(targets, t)
		}
	}
	return targets, nil
}

func (w *walker) resolveDockerSave(ctx context.Context) ([]*target, error) {
	entries, err := w.parseManifestJSON()
	if err != nil {
		return nil, err
	}
	var targets []*target
	for _, e := range entries {
		t, err := w.synthesize(ctx, e)
		if err != nil {
			return nil, err
		}
		targets = append(targets, t)
	}
	return targets, nil
}

// layerMediaType is the OCI media type of a layer compressed with c.
func layerMediaType(c Compression) (string, bool) {
	switch c {
	case None:
		return ocispec.MediaTypeImageLayer, true
	case Gzip:
		return ocispec.MediaTypeImageLayerGzip, true
	case Zstd:
		return ocispec.MediaTypeImageLayerZstd, true
	}
	return "", false
}

// synthesize builds the OCI manifest of a docker save image, puts it in Docs
// and writes the layers still held in memory to the store.
func (w *walker) synthesize(ctx context.Context, e dockerImage) (*target, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfi := w.lookup(e.Config)
	if cfi == nil {
		return nil, fmt.Errorf("manifest.json: config %q is not in the archive", e.Config)
	}
	var cb []byte
	switch {
	case cfi.doc && cfi.named:
		cb = w.docs[cfi.dgst]
	case cfi.doc:
		cb = cfi.data
	case cfi.size > w.lim.docSize:
		return nil, fmt.Errorf("manifest.json: config %q is %d bytes, more than the %d a document may have", e.Config, cfi.size, w.lim.docSize)
	default:
		return nil, fmt.Errorf("manifest.json: config %q is not a JSON document", e.Config)
	}
	cfg, err := parseConfig(cb)
	if err != nil {
		return nil, fmt.Errorf("config %q (%s): %w", e.Config, cfi.dgst, err)
	}
	w.docs[cfi.dgst] = cb
	if len(e.Layers) > w.lim.indexItems {
		return nil, fmt.Errorf("manifest.json: config %q: more than %d layers", e.Config, w.lim.indexItems)
	}
	m := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config: ocispec.Descriptor{
			MediaType: ocispec.MediaTypeImageConfig,
			Digest:    cfi.dgst,
			Size:      cfi.size,
		},
		Layers: make([]ocispec.Descriptor, 0, len(e.Layers)),
	}
	for _, p := range e.Layers {
		fi := w.lookup(p)
		if fi == nil {
			return nil, fmt.Errorf("manifest.json: layer %q is not in the archive", p)
		}
		mt, ok := layerMediaType(fi.comp)
		if !ok {
			return nil, fmt.Errorf("layer %q is %s-compressed; containerd cannot unpack such layers", p, fi.comp)
		}
		if !fi.named && !fi.stored {
			if _, ok := w.blobs[fi.dgst]; !ok {
				if err := w.putHeld(ctx, cleanName(p), fi); err != nil {
					return nil, err
				}
			}
			fi.stored, fi.data = true, nil
		}
		m.Layers = append(m.Layers, ocispec.Descriptor{MediaType: mt, Digest: fi.dgst, Size: fi.size})
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding the manifest of %s: %w", cfi.dgst, err)
	}
	md := digest.FromBytes(mb)
	if _, ok := w.docs[md]; !ok {
		if err := w.addDocBytes(e.Config, int64(len(mb))); err != nil {
			return nil, err
		}
		w.docs[md] = mb
	}
	names, err := repoTags(e)
	if err != nil {
		return nil, err
	}
	return &target{
		what: "image " + string(cfi.dgst),
		desc: ocispec.Descriptor{
			MediaType: ocispec.MediaTypeImageManifest,
			Digest:    md,
			Size:      int64(len(mb)),
			Platform: &ocispec.Platform{
				OS:           cfg.OS,
				Architecture: cfg.Architecture,
				Variant:      cfg.Variant,
				OSVersion:    cfg.OSVersion,
			},
		},
		configs: map[digest.Digest]bool{cfi.dgst: true},
		names:   names,
		noName:  "untagged docker save",
	}, nil
}

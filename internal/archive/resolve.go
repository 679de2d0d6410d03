package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
)

// imageConfig is the part of an image config the walker reads.
type imageConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Variant      string `json:"variant,omitempty"`
	OSVersion    string `json:"os.version,omitempty"`
}

// target is one image the archive holds and the names it gives it.
type target struct {
	what    string // "index.json entry sha256:…" or "image sha256:…", for errors
	desc    ocispec.Descriptor
	configs map[digest.Digest]bool // config digests reachable from desc
	names   []string
	// recorded are the names as the archive spells them, where that is not
	// the normalised name (index.docker.io/…, a familiar name), by name.
	recorded map[string]string
	bareTag  string // a bare org.opencontainers.image.ref.name, for the error
	noName   string // why there is no name, for the error
}

// finish resolves what the stream held into images.
func (w *walker) finish(ctx context.Context) (*Result, error) {
	_, hasIndex := w.meta[nameIndexJSON]
	_, hasManifest := w.meta[nameManifestJSON]
	res := &Result{Docs: w.docs, Blobs: w.blobs}
	var targets []*target
	var err error
	switch {
	case w.zarf.yaml != nil || w.zarf.checksums != nil:
		res.Format = FormatZarf
		targets, err = w.resolveZarf()
		if err == nil && w.zarf.bundleSig != nil {
			res.Package = &PackageSignature{Manifest: w.zarf.yaml, Bundle: w.zarf.bundleSig}
		}
	case hasIndex:
		if b, ok := w.meta[nameOCILayout]; ok {
			var layout ocispec.ImageLayout
			if err := json.Unmarshal(b, &layout); err != nil {
				return nil, fmt.Errorf("oci-layout: %w", err)
			}
		}
		var idx ocispec.Index
		if idx, err = w.readIndex(); err != nil {
			return nil, err
		}
		res.Format = indexFormat(idx, hasManifest)
		targets, err = w.resolveIndex(idx, nil)
		if err == nil && res.Format == FormatHybrid {
			targets, err = w.attachRepoTags(ctx, targets)
		}
	case hasManifest:
		res.Format = FormatDockerSave
		targets, err = w.resolveDockerSave(ctx)
	case w.meta[nameRepositories] != nil:
		return nil, errors.New("docker save v1.0 archive (a repositories file but no manifest.json) is not supported; save it again with Docker 1.10 or later")
	default:
		return nil, fmt.Errorf("%w: no manifest.json or index.json", ErrNotImage)
	}
	if err != nil {
		return nil, err
	}
	res.Images, err = images(targets)
	if err != nil {
		return nil, err
	}
	w.addUnlistedReferrers()
	res.Skipped = w.skipped
	return res, nil
}

// indexFormat tells the layouts with an index.json apart: a Hauler haul or a
// cosign layout by the kinds of its entries (a haul's name their images, a
// cosign layout's do not), Docker's hybrid by its manifest.json (a haul has
// one too, which flattens multi-platform images: it is not read).
func indexFormat(idx ocispec.Index, hasManifest bool) Format {
	kinds, named := false, false
	for _, d := range idx.Manifests {
		if entryKind(d) != "" {
			kinds = true
		}
		if d.Annotations[oci.AnnotationImageName] != "" {
			named = true
		}
	}
	switch {
	case kinds && named:
		return FormatHaul
	case kinds:
		return FormatCosign
	case hasManifest:
		return FormatHybrid
	}
	return FormatOCI
}

// resolveZarf checks a Zarf package's checksums, then takes the images its
// zarf.yaml names from its layout; a name zarf.yaml lists that the layout
// lacks is an error.
func (w *walker) resolveZarf() ([]*target, error) {
	switch {
	case w.zarf.yaml == nil:
		return nil, errors.New("a Zarf package without zarf.yaml (checksums.txt but no zarf.yaml)")
	case !w.inZarf:
		return nil, errors.New("a Zarf package whose first entry is neither checksums.txt nor zarf.yaml: zarf writes them sorted, checksums.txt first")
	}
	if _, ok := w.meta[nameIndexJSON]; !ok {
		return nil, fmt.Errorf("%w: a Zarf package without %s%s", ErrNotImage, zarfImages, nameIndexJSON)
	}
	pkg, err := w.zarf.verify(w)
	if err != nil {
		return nil, err
	}
	wanted, err := pkg.wanted()
	if err != nil {
		return nil, err
	}
	idx, err := w.readIndex()
	if err != nil {
		return nil, err
	}
	targets, err := w.resolveIndex(idx, wanted)
	if err != nil {
		return nil, err
	}
	// Every name the layout holds, images or not (a chart zarf.yaml lists).
	found := map[string]bool{}
	for _, d := range idx.Manifests {
		for _, ref := range []string{d.Annotations[oci.AnnotationRefName], d.Annotations[oci.AnnotationBaseImageName]} {
			if n, err := normalizeName(ref); err == nil {
				found[n] = true
			}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(wanted)) {
		if !found[n] {
			return nil, fmt.Errorf("zarf.yaml names %s, which %s%s does not hold", n, zarfImages, nameIndexJSON)
		}
	}
	return targets, nil
}

// images turns targets into sorted, de-duplicated images; a target without a
// name, or a name given to two targets, is an error.
func images(targets []*target) ([]Image, error) {
	var out []Image
	byName := make(map[string]digest.Digest)
	for _, t := range targets {
		if len(t.names) == 0 {
			switch {
			case t.bareTag != "":
				return nil, fmt.Errorf("%s has only the bare tag %q in %s; a full reference is needed", t.what, t.bareTag, oci.AnnotationRefName)
			default:
				return nil, fmt.Errorf("%s has no name (%s)", t.what, t.noName)
			}
		}
		for _, n := range t.names {
			if prev, ok := byName[n]; ok {
				if prev != t.desc.Digest {
					return nil, fmt.Errorf("name %s is given to two images in the archive: %s and %s", n, prev, t.desc.Digest)
				}
				continue
			}
			byName[n] = t.desc.Digest
			out = append(out, Image{Name: n, Target: t.desc, Recorded: t.recorded[n]})
		}
	}
	slices.SortFunc(out, func(a, b Image) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(string(a.Target.Digest), string(b.Target.Digest))
	})
	return out, nil
}

// normalizeName returns the full form of a reference; a name with neither
// tag nor digest gets ":latest".
func normalizeName(s string) (string, error) {
	n, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return "", err
	}
	return reference.TagNameOnly(n).String(), nil
}

func addName(names []string, n string) []string {
	if slices.Contains(names, n) {
		return names
	}
	return append(names, n)
}

// readIndex parses index.json.
func (w *walker) readIndex() (ocispec.Index, error) {
	var idx ocispec.Index
	if err := json.Unmarshal(w.meta[nameIndexJSON], &idx); err != nil {
		return idx, fmt.Errorf("index.json: %w", err)
	}
	if len(idx.Manifests) == 0 {
		return idx, errors.New("index.json lists no images")
	}
	if len(idx.Manifests) > w.lim.indexItems {
		return idx, fmt.Errorf("index.json lists more than %d images", w.lim.indexItems)
	}
	return idx, nil
}

// resolveIndex makes one target of each index.json entry that is an image:
// entries whose kind or content says they are signatures, attestations,
// SBOMs, referrers, charts or files are skipped (w.skipped). With wanted (a
// Zarf package), only the names it holds are taken, and never a signature's.
func (w *walker) resolveIndex(idx ocispec.Index, wanted map[string]bool) ([]*target, error) {
	var targets, unnamed []*target
	skip := func(d ocispec.Descriptor, reason string) {
		name := d.Annotations[oci.AnnotationImageName]
		if name == "" {
			name = d.Annotations[oci.AnnotationRefName]
		}
		w.skipped = append(w.skipped, Skipped{Digest: d.Digest, MediaType: d.MediaType, Size: d.Size, Name: name, Reason: reason})
	}
	for i, d := range idx.Manifests {
		if err := d.Digest.Validate(); err != nil {
			return nil, fmt.Errorf("index.json entry %d: digest %q: %w", i, d.Digest, err)
		}
		w.listed[d.Digest] = true
		kind := entryKind(d)
		if why := skipKind(kind); why != "" {
			skip(d, why)
			continue
		}
		if d.Annotations[oci.AnnotationManifestSubject] != "" {
			// A referrer of another entry, as containerd's exporter and
			// holdfast export mark them (a cosign v3 signature): never
			// an image.
			skip(d, reasonReferrer)
			continue
		}
		t := &target{
			what:    "index.json entry " + string(d.Digest),
			desc:    ocispec.Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size, Platform: d.Platform},
			configs: make(map[digest.Digest]bool),
			noName:  "no " + oci.AnnotationImageName + " or " + oci.AnnotationRefName + " annotation",
		}
		_, isDoc := w.docs[d.Digest]
		_, isBlob := w.blobs[d.Digest]
		if !isDoc && !isBlob {
			return nil, fmt.Errorf("%s is not in the archive", t.what)
		}
		if why := w.artifactReason(d.Digest); why != "" {
			skip(d, why)
			continue
		}
		if err := t.name(d, wanted != nil); err != nil {
			return nil, err
		}
		if wanted != nil {
			t.names = slices.DeleteFunc(t.names, func(n string) bool { _, sig := oci.ParseCosignTag(n); return sig || !wanted[n] })
			if len(t.names) == 0 {
				reason := "not in zarf.yaml"
				if n := d.Annotations[oci.AnnotationRefName]; n != "" {
					if tag, sig := oci.ParseCosignTag(n); sig {
						reason = tag.Kind
					}
				}
				skip(d, reason)
				continue
			}
		} else if len(t.names) > 0 {
			if what := t.dropCosignTags(); len(t.names) == 0 {
				skip(d, what)
				continue
			}
		}
		seen := make(map[digest.Digest]bool)
		mt, err := w.inspect(t.desc, 0, t.configs, seen)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.what, err)
		}
		for d := range seen {
			w.images[d] = true
		}
		t.desc.MediaType = mt
		if len(t.names) == 0 && kind != "" {
			unnamed = append(unnamed, t)
		}
		targets = append(targets, t)
	}
	if len(targets) == 0 && len(w.skipped) > 0 {
		return nil, fmt.Errorf("%w: index.json lists no image, only %s", ErrNotImage, skippedSummary(w.skipped))
	}
	if len(unnamed) > 0 {
		// A cosign layout: its entries name nothing.
		if w.name == "" {
			return nil, fmt.Errorf("%s has kind %s and no name: a cosign layout (cosign save) does not name its image; import it with holdfast import --name REF", unnamed[0].what, entryKind(idx.Manifests[0]))
		}
		if len(unnamed) > 1 {
			return nil, fmt.Errorf("the layout holds %d images without a name; --name names one", len(unnamed))
		}
		name, err := normalizeName(w.name)
		if err != nil {
			return nil, fmt.Errorf("--name %q: %w", w.name, err)
		}
		unnamed[0].names = []string{name}
	}
	return targets, nil
}

// name takes t's names from its index entry d: io.containerd.image.name, else
// a full org.opencontainers.image.ref.name; in a Zarf package also
// org.opencontainers.image.base.name, which older packages give alone
// (sometimes without docker.io/).
func (t *target) name(d ocispec.Descriptor, zarf bool) error {
	if n, ok := d.Annotations[oci.AnnotationImageName]; ok {
		name, err := normalizeName(n)
		if err != nil {
			return fmt.Errorf("%s: %s %q: %w", t.what, oci.AnnotationImageName, n, err)
		}
		t.addName(name, n)
		return nil
	}
	refs := []string{d.Annotations[oci.AnnotationRefName]}
	if zarf {
		refs = append(refs, d.Annotations[oci.AnnotationBaseImageName])
	}
	for _, ref := range refs {
		switch {
		case ref == "":
		case !strings.ContainsAny(ref, "/:@"):
			t.bareTag = ref
		default:
			name, err := normalizeName(ref)
			if err != nil {
				return fmt.Errorf("%s: %s %q is not a full reference: %w", t.what, oci.AnnotationRefName, ref, err)
			}
			t.addName(name, ref)
		}
	}
	return nil
}

// dropCosignTags takes cosign's <repo>:sha256-<hex>.sig (.att, .sbom) tags,
// which an OCI archive may carry beside the image, out of t's names: they
// are never images. It returns the kind of the last one it took.
func (t *target) dropCosignTags() string {
	var what string
	t.names = slices.DeleteFunc(t.names, func(n string) bool {
		tag, sig := oci.ParseCosignTag(n)
		if sig {
			what = tag.Kind
		}
		return sig
	})
	return what
}

// addName gives t the name, which the archive spells as recorded.
func (t *target) addName(name, recorded string) {
	t.names = addName(t.names, name)
	if recorded != name {
		if t.recorded == nil {
			t.recorded = map[string]string{}
		}
		if _, ok := t.recorded[name]; !ok {
			t.recorded[name] = recorded
		}
	}
}

// skippedSummary counts skipped entries by reason: "2 signature, 1 chart".
func skippedSummary(s []Skipped) string {
	n := map[string]int{}
	for _, e := range s {
		n[e.Reason]++
	}
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(n)) {
		parts = append(parts, fmt.Sprintf("%d %s", n[r], r))
	}
	return strings.Join(parts, ", ")
}

// inspect checks the document d (when the archive has it) and what it refers
// to, collects the config digests of its manifests and returns d's media type
// (from the document when the descriptor has none).
func (w *walker) inspect(d ocispec.Descriptor, depth int, configs, seen map[digest.Digest]bool) (string, error) {
	b, ok := w.docs[d.Digest]
	if !ok {
		if size, ok := w.blobs[d.Digest]; ok && size != d.Size {
			return "", fmt.Errorf("%s is %d bytes, its descriptor says %d", d.Digest, size, d.Size)
		}
		return d.MediaType, nil // not here (partial archive), or not a document
	}
	if int64(len(b)) != d.Size {
		return "", fmt.Errorf("%s is %d bytes, its descriptor says %d", d.Digest, len(b), d.Size)
	}
	if seen[d.Digest] {
		return d.MediaType, nil
	}
	seen[d.Digest] = true
	if depth > w.lim.depth {
		return "", fmt.Errorf("%s: indexes nested more than %d deep", d.Digest, w.lim.depth)
	}
	mt, err := mediaTypeOf(d, b)
	if err != nil {
		return "", err
	}
	switch {
	case oci.IsIndex(mt):
		err = w.inspectIndex(d, b, depth, configs, seen)
	case oci.IsManifest(mt):
		err = w.inspectManifest(d, b, configs)
	case mt == oci.MediaTypeDockerSchema1 || mt == oci.MediaTypeDockerSchema1JWS:
		return "", fmt.Errorf("%s: docker schema 1 manifests are not supported", d.Digest)
	case depth == 0:
		return "", fmt.Errorf("%s: unsupported media type %q", d.Digest, mt)
	default:
		// Something else an index lists (an artifact): not ours to check.
	}
	if err != nil {
		return "", err
	}
	return mt, nil
}

// mediaTypeOf is the media type of the document b: its descriptor's, when
// that says index or manifest; else what the document says of itself, or
// its shape.
func mediaTypeOf(d ocispec.Descriptor, b []byte) (string, error) {
	var probe struct {
		SchemaVersion int             `json:"schemaVersion"`
		MediaType     string          `json:"mediaType"`
		Manifests     json.RawMessage `json:"manifests"`
		Config        json.RawMessage `json:"config"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return "", fmt.Errorf("%s: %w", d.Digest, err)
	}
	mt := d.MediaType
	if !oci.IsIndex(mt) && !oci.IsManifest(mt) {
		switch {
		case probe.MediaType != "":
			mt = probe.MediaType
		case probe.SchemaVersion == 1:
			mt = oci.MediaTypeDockerSchema1
		case probe.Manifests != nil:
			mt = ocispec.MediaTypeImageIndex
		case probe.Config != nil:
			mt = ocispec.MediaTypeImageManifest
		}
	}
	return mt, nil
}

// inspectIndex checks the index d (b) and each manifest it lists.
func (w *walker) inspectIndex(d ocispec.Descriptor, b []byte, depth int, configs, seen map[digest.Digest]bool) error {
	var idx ocispec.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		return fmt.Errorf("index %s: %w", d.Digest, err)
	}
	if len(idx.Manifests) > w.lim.indexItems {
		return fmt.Errorf("index %s lists more than %d manifests", d.Digest, w.lim.indexItems)
	}
	for _, c := range idx.Manifests {
		if err := c.Digest.Validate(); err != nil {
			return fmt.Errorf("index %s: digest %q: %w", d.Digest, c.Digest, err)
		}
		if _, err := w.inspect(c, depth+1, configs, seen); err != nil {
			return err
		}
	}
	return nil
}

// inspectManifest checks the manifest d (b): its digests, the sizes of what
// the archive holds of it, and, for an image to run, that containerd can
// unpack its layers; it adds its config to configs.
func (w *walker) inspectManifest(d ocispec.Descriptor, b []byte, configs map[digest.Digest]bool) error {
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("manifest %s: %w", d.Digest, err)
	}
	if err := m.Config.Digest.Validate(); err != nil {
		return fmt.Errorf("manifest %s: config digest %q: %w", d.Digest, m.Config.Digest, err)
	}
	if len(m.Layers) > w.lim.indexItems {
		return fmt.Errorf("manifest %s lists more than %d layers", d.Digest, w.lim.indexItems)
	}
	for _, l := range m.Layers {
		if err := l.Digest.Validate(); err != nil {
			return fmt.Errorf("manifest %s: layer digest %q: %w", d.Digest, l.Digest, err)
		}
		if size, ok := w.blobs[l.Digest]; ok && size != l.Size {
			return fmt.Errorf("manifest %s: layer %s is %d bytes, the manifest says %d", d.Digest, l.Digest, size, l.Size)
		}
	}
	configs[m.Config.Digest] = true
	cb, ok := w.docs[m.Config.Digest]
	if !ok {
		return nil
	}
	if int64(len(cb)) != m.Config.Size {
		return fmt.Errorf("manifest %s: config %s is %d bytes, the manifest says %d", d.Digest, m.Config.Digest, len(cb), m.Config.Size)
	}
	if !oci.IsImageConfig(m.Config.MediaType) {
		return nil
	}
	cfg, err := parseConfig(cb)
	if err != nil {
		return fmt.Errorf("config %s: %w", m.Config.Digest, err)
	}
	// An image to run (not an attestation, whose platform is
	// unknown/unknown): containerd must be able to unpack its layers.
	if cfg.OS != "unknown" {
		for _, l := range m.Layers {
			if !oci.IsUnpackable(l.MediaType) {
				return fmt.Errorf("manifest %s: layer %s has media type %q, which containerd cannot unpack", d.Digest, l.Digest, l.MediaType)
			}
		}
	}
	return nil
}

// parseConfig reads an image config; it must name an OS and an architecture,
// or containerd filters the image out.
func parseConfig(b []byte) (imageConfig, error) {
	var c imageConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return c, err
	}
	if c.OS == "" || c.Architecture == "" {
		return c, errors.New("no os/architecture; containerd filters such images out")
	}
	return c, nil
}

package archive

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"go.yaml.in/yaml/v3"
)

// The bundles air-gap users carry hold images beside what is not an image:
// a Hauler haul marks each index.json entry with a kind, a cosign layout too;
// a Zarf package keeps its images in an OCI layout under images/ and names
// the ones it wants in zarf.yaml. What is not an image is skipped, never
// imported under the name of the image it belongs to.

// annotationKind marks the entries of a Hauler haul's or a cosign layout's
// index.json.
const annotationKind = "kind"

// Kinds, as Hauler writes them; hauls written by Hauler up to 1.4.3, and
// cosign save, use legacyKindPrefix instead of kindPrefix.
const (
	kindPrefix       = "dev.hauler/"
	legacyKindPrefix = "dev.cosignproject.cosign/"
	kindImage        = kindPrefix + "image"
	kindImageIndex   = kindPrefix + "imageIndex"
)

// Config media types of what Hauler stores as kind image but is no image.
const (
	mediaTypeHelmConfig      = "application/vnd.cncf.helm.config.v1+json"
	mediaTypeHaulerFilPrefix = "application/vnd.content.hauler.file."
)

// Zarf's package files.
const (
	zarfYAML      = "zarf.yaml"
	zarfChecksums = "checksums.txt"
	zarfBundleSig = "zarf.bundle.sig" // a sigstore bundle over zarf.yaml (zarf package sign)
	zarfImages    = "images/"         // the package's OCI layout
)

// Skipped is an index entry a walk did not import, and why.
type Skipped struct {
	Digest    digest.Digest
	MediaType string // as the index entry gives it
	Size      int64  // as the index entry gives it
	Name      string // the name it carries, if any
	Reason    string // "signature", "attestation", "sbom", "referrer", "chart", "file", "not in zarf.yaml"
}

// entryKind is an index.json entry's kind with the legacy prefix made
// current; "" when it has none.
func entryKind(d ocispec.Descriptor) string {
	k := d.Annotations[annotationKind]
	if rest, ok := strings.CutPrefix(k, legacyKindPrefix); ok {
		return kindPrefix + rest
	}
	return k
}

// skipKind says why an entry of this kind is no image to import, or "".
func skipKind(kind string) string {
	switch {
	case kind == "" || kind == kindImage || kind == kindImageIndex:
		return ""
	case kind == kindPrefix+"sigs":
		return "signature"
	case kind == kindPrefix+"atts":
		return "attestation"
	case kind == kindPrefix+"sboms":
		return "sbom"
	case strings.HasPrefix(kind, kindPrefix+"referrers"):
		return reasonReferrer
	}
	return "kind " + kind
}

// artifactReason says why a manifest in the walk is an artifact, not an
// image (a Helm chart, a Hauler file), or "".
func (w *walker) artifactReason(d digest.Digest) string {
	b, ok := w.docs[d]
	if !ok {
		return ""
	}
	var m ocispec.Manifest
	if json.Unmarshal(b, &m) != nil {
		return ""
	}
	switch {
	case m.Config.MediaType == mediaTypeHelmConfig || m.ArtifactType == mediaTypeHelmConfig:
		return "chart"
	case strings.HasPrefix(m.Config.MediaType, mediaTypeHaulerFilPrefix):
		return "file"
	}
	return ""
}

// zarfPackage is what holdfast reads of a zarf.yaml.
type zarfPackage struct {
	Metadata struct {
		Name              string `yaml:"name"`
		AggregateChecksum string `yaml:"aggregateChecksum"`
	} `yaml:"metadata"`
	Components []struct {
		Name          string   `yaml:"name"`
		Images        []string `yaml:"images"`
		ImageArchives []struct {
			Images []string `yaml:"images"`
		} `yaml:"imageArchives"`
	} `yaml:"components"`
}

// zarf is what a walk keeps of a Zarf package.
type zarf struct {
	yaml      []byte
	checksums []byte
	bundleSig []byte
	sums      map[string]string // file → sha256 hex of what the walk read: index.json and oci-layout under images/
}

// wanted are the image names zarf.yaml lists, normalised.
func (p zarfPackage) wanted() (map[string]bool, error) {
	out := map[string]bool{}
	for _, c := range p.Components {
		names := slices.Clone(c.Images)
		for _, a := range c.ImageArchives {
			names = append(names, a.Images...)
		}
		for _, n := range names {
			norm, err := normalizeName(n)
			if err != nil {
				return nil, fmt.Errorf("zarf.yaml: component %s: image %q: %w", c.Name, n, err)
			}
			out[norm] = true
		}
	}
	return out, nil
}

// verify checks the chain of checksums down to every file of the package the
// walk used: checksums.txt against zarf.yaml's aggregateChecksum, then the
// layout's index.json and oci-layout, and each blob the walk read (its name
// is its digest, which the walk checked), against checksums.txt.
func (z *zarf) verify(w *walker) (zarfPackage, error) {
	var pkg zarfPackage
	if err := yaml.Unmarshal(z.yaml, &pkg); err != nil {
		return pkg, fmt.Errorf("zarf.yaml: %w", err)
	}
	if z.checksums == nil {
		return pkg, errors.New("the Zarf package has no checksums.txt")
	}
	sum := sha256.Sum256(z.checksums)
	if got, want := hex.EncodeToString(sum[:]), pkg.Metadata.AggregateChecksum; got != want {
		return pkg, fmt.Errorf("checksums.txt has sha256 %s, zarf.yaml's aggregateChecksum says %q", got, want)
	}
	listed := map[string]string{}
	for i, line := range strings.Split(strings.TrimSuffix(string(z.checksums), "\n"), "\n") {
		h, file, ok := strings.Cut(line, " ")
		if !ok || len(h) != 64 {
			return pkg, fmt.Errorf("checksums.txt line %d: %q is not \"<sha256> <path>\"", i+1, line)
		}
		listed[file] = h
	}
	check := func(file, got string) error {
		want, ok := listed[file]
		switch {
		case !ok:
			return fmt.Errorf("%s is not listed in checksums.txt", file)
		case want != got:
			return fmt.Errorf("%s has sha256 %s, checksums.txt says %s", file, got, want)
		}
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(z.sums)) {
		if err := check(name, z.sums[name]); err != nil {
			return pkg, err
		}
	}
	for _, d := range slices.Sorted(maps.Keys(w.blobs)) {
		if err := check(zarfImages+blobName(d), d.Encoded()); err != nil {
			return pkg, err
		}
	}
	for _, d := range slices.Sorted(maps.Keys(w.docs)) {
		if err := check(zarfImages+blobName(d), d.Encoded()); err != nil {
			return pkg, err
		}
	}
	return pkg, nil
}

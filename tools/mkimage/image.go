package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/distribution/reference"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/holdfast-project/holdfast/internal/oci"
)

// platformDir is one platform of the image and the dir holding its binaries.
type platformDir struct {
	OS, Arch, Variant string
	Dir               string
}

func parsePlatform(s string) (platformDir, error) {
	spec, dir, ok := strings.Cut(s, "=")
	parts := strings.Split(spec, "/")
	if !ok || dir == "" || len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return platformDir{}, fmt.Errorf("platform %q is not OS/ARCH[/VARIANT]=DIR", s)
	}
	p := platformDir{OS: parts[0], Arch: parts[1], Dir: dir}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p, nil
}

func (p platformDir) String() string {
	s := p.OS + "/" + p.Arch
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// options are everything the image is made from.
type options struct {
	Output     string
	Repo       string
	Version    string
	Revision   string
	Source     string
	Created    time.Time
	Bins       []string
	Entrypoint string // one of Bins
	Platforms  []platformDir
}

// Name is the image's full name, REPO:VERSION.
func (o options) Name() string { return o.Repo + ":" + o.Version }

func (o options) check() error {
	switch {
	case o.Output == "":
		return errors.New("-o is required")
	case o.Repo == "" || o.Version == "":
		return errors.New("-repo and -version are required")
	case len(o.Bins) == 0:
		return errors.New("at least one -bin is required")
	case len(o.Platforms) == 0:
		return errors.New("at least one -platform is required")
	case !slices.Contains(o.Bins, o.Entrypoint):
		return fmt.Errorf("the entrypoint %q is not one of the -bin names %q", o.Entrypoint, o.Bins)
	}
	// A full name, as written (reference.ParseNamed refuses what it would
	// have to complete, such as a missing registry), with a tag.
	n, err := reference.ParseNamed(o.Name())
	if err != nil {
		return fmt.Errorf("image name %s: %w", o.Name(), err)
	}
	if _, ok := n.(reference.Tagged); !ok {
		return fmt.Errorf("image name %s has no tag", o.Name())
	}
	seen := map[string]bool{}
	for _, p := range o.Platforms {
		if seen[p.String()] {
			return fmt.Errorf("platform %s given twice", p)
		}
		seen[p.String()] = true
	}
	return nil
}

// labels are the image config's labels (and the index's annotations).
func (o options) labels() map[string]string {
	l := map[string]string{
		"org.opencontainers.image.version": o.Version,
		"org.opencontainers.image.created": o.Created.Format(time.RFC3339),
	}
	if o.Revision != "" {
		l["org.opencontainers.image.revision"] = o.Revision
	}
	if o.Source != "" {
		l["org.opencontainers.image.source"] = o.Source
	}
	return l
}

// build makes the multi-platform index.
func build(o options) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range o.Platforms {
		img, err := buildImage(o, p)
		if err != nil {
			return nil, fmt.Errorf("image for %s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Arch, Variant: p.Variant}},
		})
	}
	return mutate.Annotations(idx, o.labels()).(v1.ImageIndex), nil
}

// buildImage makes one platform's image: one gzip layer of the binaries.
func buildImage(o options, p platformDir) (v1.Image, error) {
	layerBytes, err := layerTar(o, p)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("reading the layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: o.Created}, CreatedBy: "mkimage: /" + strings.Join(o.Bins, ", /")},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: o.Created}
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Arch, p.Variant
	cf.Config.Entrypoint = []string{"/" + o.Entrypoint}
	cf.Config.Cmd = []string{"run"}
	cf.Config.Labels = o.labels()
	return mutate.ConfigFile(img, cf)
}

// layerTar is the gzip tar of the platform's binaries: sorted, mode 0755,
// owned by 0:0, timed at the epoch; no name or time in the gzip header.
func layerTar(o options, p platformDir) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	names := slices.Clone(o.Bins)
	slices.Sort(names)
	for _, name := range names {
		path := filepath.Join(p.Dir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		if err := checkMachine(path, b, p); err != nil {
			return nil, err
		}
		hdr := &tar.Header{
			Typeflag: tar.TypeReg, Name: name, Size: int64(len(b)), Mode: 0o755,
			ModTime: o.Created, Format: tar.FormatPAX,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeFile builds the image and writes the layout tar to o.Output (through
// a temp file renamed into place). It returns the index's digest.
func writeFile(o options) (v1.Hash, error) {
	idx, err := build(o)
	if err != nil {
		return v1.Hash{}, err
	}
	tmp := o.Output + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.Remove(tmp)
	dgst, err := writeLayout(f, idx, o)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return v1.Hash{}, fmt.Errorf("writing %s: %w", o.Output, err)
	}
	if err := os.Rename(tmp, o.Output); err != nil {
		return v1.Hash{}, err
	}
	return dgst, nil
}

// writeLayout writes idx as an OCI image layout tar: oci-layout, index.json
// (one entry, the index, named by annotations), then every blob by digest.
func writeLayout(w io.Writer, idx v1.ImageIndex, o options) (v1.Hash, error) {
	blobs := map[v1.Hash][]byte{}
	add := func(raw []byte) {
		blobs[v1.Hash{Algorithm: "sha256", Hex: sha256Hex(raw)}] = raw
	}
	raw, err := idx.RawManifest()
	if err != nil {
		return v1.Hash{}, err
	}
	add(raw)
	im, err := idx.IndexManifest()
	if err != nil {
		return v1.Hash{}, err
	}
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return v1.Hash{}, err
		}
		for _, get := range []func() ([]byte, error){img.RawManifest, img.RawConfigFile} {
			b, err := get()
			if err != nil {
				return v1.Hash{}, err
			}
			add(b)
		}
		layers, err := img.Layers()
		if err != nil {
			return v1.Hash{}, err
		}
		for _, l := range layers {
			rc, err := l.Compressed()
			if err != nil {
				return v1.Hash{}, err
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				return v1.Hash{}, err
			}
			add(b)
		}
	}
	dgst, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	top := v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIImageIndex, Digest: dgst, Size: int64(len(raw)),
			// containerd (ctr import, K3s, holdfast) takes the full name from the
			// first; the second is the tag alone, as the OCI layout spec has it.
			Annotations: map[string]string{oci.AnnotationImageName: o.Name(), oci.AnnotationRefName: o.Version},
		}},
	}
	indexJSON, err := json.Marshal(top)
	if err != nil {
		return v1.Hash{}, err
	}
	tw := tar.NewWriter(w)
	put := func(name string, b []byte) error {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(b)), Mode: 0o644, ModTime: o.Created, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	if err := put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return v1.Hash{}, err
	}
	if err := put("index.json", indexJSON); err != nil {
		return v1.Hash{}, err
	}
	keys := make([]v1.Hash, 0, len(blobs))
	for h := range blobs {
		keys = append(keys, h)
	}
	slices.SortFunc(keys, func(a, b v1.Hash) int { return strings.Compare(a.Hex, b.Hex) })
	for _, h := range keys {
		if err := put("blobs/sha256/"+h.Hex, blobs[h]); err != nil {
			return v1.Hash{}, err
		}
	}
	return dgst, tw.Close()
}

func sha256Hex(b []byte) string {
	h, _, _ := v1.SHA256(bytes.NewReader(b))
	return h.Hex
}

// elfMachines are the ELF machines of the architectures an image may have.
var elfMachines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "arm": elf.EM_ARM, "386": elf.EM_386,
	"ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "riscv64": elf.EM_RISCV,
}

// checkMachine refuses an ELF binary built for another architecture than
// the platform it is put in (a host build left in the wrong dir, say).
// Files that are not ELF (scripts) are taken as they are.
func checkMachine(path string, b []byte, p platformDir) error {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil
	}
	defer f.Close()
	if want, ok := elfMachines[p.Arch]; ok && f.Machine != want {
		return fmt.Errorf("%s is an ELF binary for %s, not for %s", path, f.Machine, p)
	}
	return nil
}

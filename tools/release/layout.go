package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
)

// layout is an OCI image layout in a directory: the one make image wrote,
// to which the release adds referrers of the image.
type layout struct {
	dir string
	// index is index.json's entry of the image: its multi-platform
	// index, named by its annotations.
	index ocispec.Descriptor
	// referrers are the index.json entries of the referrers added, each
	// marked with its subject as containerd's exporter marks them.
	referrers []ocispec.Descriptor
}

// maxIndexJSON bounds what is read of the archive's index.json.
const maxIndexJSON = 1 << 20

// layoutVersion is the oci-layout file, as make image writes it.
var layoutVersion = []byte(`{"imageLayoutVersion":"1.0.0"}`)

var blobName = regexp.MustCompile(`^blobs/sha256/[0-9a-f]{64}$`)

// extractLayout unpacks the image archive at path (an OCI image layout tar
// of one image, as make image writes it) into dir: each blob checked
// against its name, nothing but oci-layout, index.json and blobs taken.
func extractLayout(path, dir string) (*layout, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		return nil, err
	}
	l := &layout{dir: dir}
	var indexJSON []byte
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		name := strings.TrimPrefix(hdr.Name, "./")
		switch {
		case hdr.Typeflag == tar.TypeDir:
			continue
		case hdr.Typeflag != tar.TypeReg:
			return nil, fmt.Errorf("%s: entry %s is no regular file", path, hdr.Name)
		case name == "oci-layout":
			continue
		case name == "index.json":
			if indexJSON, err = io.ReadAll(io.LimitReader(tr, maxIndexJSON+1)); err != nil {
				return nil, fmt.Errorf("%s: index.json: %w", path, err)
			}
			if len(indexJSON) > maxIndexJSON {
				return nil, fmt.Errorf("%s: index.json is more than %d bytes", path, maxIndexJSON)
			}
		case blobName.MatchString(name):
			d := digest.NewDigestFromEncoded(digest.SHA256, strings.TrimPrefix(name, "blobs/sha256/"))
			if err := l.writeBlob(d, tr); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
		default:
			return nil, fmt.Errorf("%s: entry %s is no part of an OCI image layout", path, hdr.Name)
		}
	}
	if indexJSON == nil {
		return nil, fmt.Errorf("%s: no index.json", path)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(indexJSON, &idx); err != nil {
		return nil, fmt.Errorf("%s: index.json: %w", path, err)
	}
	if len(idx.Manifests) != 1 || !oci.IsIndex(idx.Manifests[0].MediaType) || idx.Manifests[0].Annotations[oci.AnnotationImageName] == "" {
		return nil, fmt.Errorf("%s: index.json lists %d entries, want one named multi-platform index (make image)", path, len(idx.Manifests))
	}
	l.index = idx.Manifests[0]
	// For go-containerregistry's layout reader, which pushes the image.
	if err := os.WriteFile(filepath.Join(dir, "index.json"), indexJSON, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), layoutVersion, 0o644); err != nil {
		return nil, err
	}
	if _, err := l.readBlob(l.index.Digest); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

// blobPath is where the layout keeps the blob d.
func (l *layout) blobPath(d digest.Digest) string {
	return filepath.Join(l.dir, "blobs", d.Algorithm().String(), d.Encoded())
}

// writeBlob writes the blob d from r unless the layout has it: through a
// temp file, renamed into place once its content is d.
func (l *layout) writeBlob(d digest.Digest, r io.Reader) error {
	if err := d.Validate(); err != nil || d.Algorithm() != digest.SHA256 {
		return fmt.Errorf("blob %q: no sha256 digest", d)
	}
	p := l.blobPath(d)
	if _, err := os.Lstat(p); err == nil {
		_, err = io.Copy(io.Discard, r)
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".blob-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("blob %s: %w", d, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != d.Encoded() {
		return fmt.Errorf("blob %s: content has digest sha256:%s", d, got)
	}
	return os.Rename(f.Name(), p)
}

// addBlob writes b as a blob and says its digest.
func (l *layout) addBlob(b []byte) (digest.Digest, error) {
	d := digest.FromBytes(b)
	return d, l.writeBlob(d, bytes.NewReader(b))
}

// readBlob reads a small blob (a manifest, an index) of the layout.
func (l *layout) readBlob(d digest.Digest) ([]byte, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(l.blobPath(d))
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", d, err)
	}
	return b, nil
}

// manifests are the digests of the platform manifests of the image's index.
func (l *layout) manifests() ([]ocispec.Descriptor, error) {
	b, err := l.readBlob(l.index.Digest)
	if err != nil {
		return nil, err
	}
	var idx ocispec.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("index %s: %w", l.index.Digest, err)
	}
	return idx.Manifests, nil
}

// addReferrer lists the referrer manifest d (written already) of subject
// in index.json.
func (l *layout) addReferrer(d ocispec.Descriptor, subject digest.Digest) {
	if slices.ContainsFunc(l.referrers, func(r ocispec.Descriptor) bool { return r.Digest == d.Digest }) {
		return
	}
	d.Annotations = map[string]string{oci.AnnotationManifestSubject: subject.String()}
	d.Platform, d.URLs, d.Data = nil, nil, nil
	l.referrers = append(l.referrers, d)
}

// writeTar writes the layout as an OCI image layout tar at out, the same
// bytes for the same content: oci-layout, index.json (the image, then its
// referrers by digest), then every blob by digest, each entry timed at
// created, mode 0644, owned by 0:0. It is written beside out and renamed.
func (l *layout) writeTar(out string, created time.Time) error {
	refs := slices.Clone(l.referrers)
	slices.SortFunc(refs, func(a, b ocispec.Descriptor) int { return strings.Compare(string(a.Digest), string(b.Digest)) })
	idx := ocispec.Index{MediaType: ocispec.MediaTypeImageIndex, Manifests: append([]ocispec.Descriptor{l.index}, refs...)}
	idx.SchemaVersion = 2
	indexJSON, err := json.Marshal(idx)
	if err != nil {
		return err
	}
	es, err := os.ReadDir(filepath.Join(l.dir, "blobs", "sha256"))
	if err != nil {
		return err
	}
	return writeAtomic(out, func(w io.Writer) error {
		tw := tar.NewWriter(w)
		put := func(name string, size int64, r io.Reader) error {
			hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644, ModTime: created, Format: tar.FormatPAX}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			_, err := io.Copy(tw, r)
			return err
		}
		if err := put("oci-layout", int64(len(layoutVersion)), bytes.NewReader(layoutVersion)); err != nil {
			return err
		}
		if err := put("index.json", int64(len(indexJSON)), bytes.NewReader(indexJSON)); err != nil {
			return err
		}
		for _, e := range es { // ReadDir sorts by name
			if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			if err := putFile(put, "blobs/sha256/"+e.Name(), filepath.Join(l.dir, "blobs", "sha256", e.Name())); err != nil {
				return err
			}
		}
		return tw.Close()
	})
}

// putFile copies the file path into a tar as name.
func putFile(put func(string, int64, io.Reader) error, name, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	return put(name, info.Size(), f)
}

// writeAtomic writes the file out through write: into a new hidden file
// beside it (never through a link), renamed over out once complete.
func writeAtomic(out string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*.partial")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return os.Rename(f.Name(), out)
}

// writeFile writes b to out (writeAtomic).
func writeFile(out string, b []byte) error {
	return writeAtomic(out, func(w io.Writer) error { _, err := w.Write(b); return err })
}

package archive

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"slices"
	"testing"

	"github.com/distribution/reference"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// FuzzWalk feeds Walk hostile archives: it must never panic, and what it
// accepts must hold together.
func FuzzWalk(f *testing.F) {
	im := makeImage(f, "amd64", None, "bin/sh")
	gz := makeImage(f, "arm64", Gzip, "etc/os-release")
	multi := blob{ocispec.MediaTypeImageIndex, indexJSON(f, withPlatform(im.manifest.desc(), "amd64"), withPlatform(gz.manifest.desc(), "arm64"))}
	oci := tarBytes(f, ociEntries("./", indexJSON(f, withAnnotations(im.manifest.desc(), annotationContainerdName, "docker.io/library/a:1", annotationRefName, "1")), im.blobs()...))
	testenv.Seeds(f, map[string][]any{
		"oci":         {oci},
		"oci-index":   {tarBytes(f, ociEntries("", indexJSON(f, withAnnotations(multi.desc(), annotationRefName, "example.com/m:1")), append([]blob{multi}, im.blobs()...)...))},
		"docker-save": {tarBytes(f, dockerSaveEntries(f, false, []image{im}, [][]string{{"busybox:1.36"}}))},
		"ggcr":        {tarBytes(f, ggcrEntries(f, gz, "example.com/app:2"))},
		"hybrid":      {tarBytes(f, hybridEntries(f, []image{im}, []ocispec.Descriptor{im.manifest.desc()}, [][]string{{"b:1"}}))},
		"oci-gzip":    {compress(f, Gzip, oci)},
		"oci-zstd":    {compress(f, Zstd, oci)},
		// Read by its seek table from the file, as a stream the other time.
		"oci-seekable-zstd": {append(fixture.ConcatZstd(fixture.ZstdFramesOf(oci, 4096)), fixture.SeekTableOf(fixture.ZstdFramesOf(oci, 4096))...)},
		"text":              {[]byte("not an archive")},
	})

	f.Fuzz(func(t *testing.T, b []byte) {
		st := newMemStore()
		// A zstd frame header alone makes the decoder allocate the window it
		// declares (up to 2 GiB; TestZstdWindowLimit covers that): keep fuzzing
		// fast by accepting small windows only.
		lim := defaultLimits()
		lim.zstdWindow = 1 << 20
		res, err := walk(t.Context(), bytes.NewReader(b), st, WalkOptions{Concurrency: 4}, lim)
		// The same bytes as a stream (no seeking) give the same outcome.
		res2, err2 := walk(t.Context(), struct{ io.Reader }{bytes.NewReader(b)}, newMemStore(), WalkOptions{}, lim)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("seekable: %v; stream: %v", err, err2)
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		j1, _ := json.Marshal(res.Images)
		j2, _ := json.Marshal(res2.Images)
		if !bytes.Equal(j1, j2) || res.BytesRead != res2.BytesRead {
			t.Fatalf("seekable and stream differ: %v %d; %v %d", res.Images, res.BytesRead, res2.Images, res2.BytesRead)
		}
		if !maps.EqualFunc(res.Docs, res2.Docs, bytes.Equal) || !maps.Equal(res.Blobs, res2.Blobs) {
			t.Fatalf("seekable and stream differ: docs %v, blobs %v; docs %v, blobs %v", slices.Collect(maps.Keys(res.Docs)), res.Blobs, slices.Collect(maps.Keys(res2.Docs)), res2.Blobs)
		}
		if res.BytesRead != int64(len(b)) {
			t.Errorf("BytesRead %d of %d", res.BytesRead, len(b))
		}
		if len(res.Images) == 0 {
			t.Error("success without images")
		}
		for _, im := range res.Images {
			if _, err := reference.ParseNormalizedNamed(im.Name); err != nil {
				t.Errorf("image name %q: %v", im.Name, err)
			}
			_, isDoc := res.Docs[im.Target.Digest]
			_, isBlob := res.Blobs[im.Target.Digest]
			if !isDoc && !isBlob {
				t.Errorf("%s: target %s not in the archive", im.Name, im.Target.Digest)
			}
		}
		for d, doc := range res.Docs {
			if d.Algorithm().FromBytes(doc) != d {
				t.Errorf("Docs[%s] has other bytes", d)
			}
		}
		for d := range res.Blobs {
			if _, ok := st.blobs[d]; !ok {
				t.Errorf("blob %s not in the store", d)
			}
		}
	})
}

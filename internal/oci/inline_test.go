package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// TestInlineBlobs: the copy's config and layers carry their blobs' bytes in
// data (each decodes to its blob, digest and size unchanged); every other
// field is kept, unknown ones too; the same bytes twice; a blob the reader
// lacks, one whose bytes do not match, and one that would take the copy
// over the bound stay plain descriptors, and the copy stays within it.
func TestInlineBlobs(t *testing.T) {
	ctx := context.Background()
	config := []byte(`{}`)
	payload := []byte(`{"critical":{"identity":{"docker-reference":"example.com/app"},"image":{"docker-manifest-digest":"sha256:aa"},"type":"cosign container image signature"},"optional":null}`)
	big := bytes.Repeat([]byte("b"), 40<<10)
	lacking := []byte("not had")
	lying := []byte("the bytes of another blob")
	blobs := map[digest.Digest][]byte{digest.FromBytes(config): config, digest.FromBytes(payload): payload, digest.FromBytes(big): big,
		digest.FromString("a blob whose bytes lie"): lying}
	r := ReaderFunc(func(_ context.Context, d ocispec.Descriptor) ([]byte, error) {
		if b, ok := blobs[d.Digest]; ok {
			return b, nil
		}
		return nil, NotFound(fmt.Errorf("%s", d.Digest))
	})
	desc := func(mt string, b []byte) string {
		return fmt.Sprintf(`{"mediaType":%q,"digest":%q,"size":%d,"annotations":{"dev.cosignproject.cosign/signature":"MEUC"}}`, mt, digest.FromBytes(b), len(b))
	}
	raw := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"application/x-test","x-unknown":[1,2],` +
		`"config":` + desc("application/vnd.oci.empty.v1+json", config) + `,"layers":[` + desc("application/x-payload", payload) + `,` +
		desc("application/x-big", big) + `,` + desc("application/x-lacking", lacking) + `,` +
		fmt.Sprintf(`{"mediaType":"application/x-lying","digest":%q,"size":%d}`, digest.FromString("a blob whose bytes lie"), len(lying)) + `],` +
		`"subject":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:` + strings.Repeat("a", 64) + `","size":7},` +
		`"annotations":{"k":"v"}}`)
	data, d, ok, err := InlineBlobs(ctx, raw, MaxInlineManifest, r)
	if err != nil || !ok {
		t.Fatalf("InlineBlobs: ok %v, %v", ok, err)
	}
	if d.Digest != digest.FromBytes(data) || d.Size != int64(len(data)) || d.MediaType != ocispec.MediaTypeImageManifest {
		t.Errorf("descriptor %+v does not describe the %d bytes", d, len(data))
	}
	if len(data) > MaxInlineManifest {
		t.Errorf("the copy is %d bytes, over the bound %d", len(data), MaxInlineManifest)
	}
	again, _, _, _ := InlineBlobs(ctx, raw, MaxInlineManifest, r)
	if !bytes.Equal(again, data) {
		t.Errorf("two copies of one manifest differ:\n%s\n%s", data, again)
	}
	var orig, cp map[string]json.RawMessage
	if err := json.Unmarshal(raw, &orig); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &cp); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(keys(orig), keys(cp)) {
		t.Errorf("the copy's fields %v, the manifest's %v", keys(cp), keys(orig))
	}
	for _, k := range []string{"schemaVersion", "mediaType", "artifactType", "x-unknown", "subject", "annotations"} {
		if !jsonEqual(t, orig[k], cp[k]) {
			t.Errorf("%s: the copy has %s, the manifest %s", k, cp[k], orig[k])
		}
	}
	var om, m ocispec.Manifest
	if err := json.Unmarshal(raw, &om); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != len(om.Layers) {
		t.Fatalf("the copy has %d layers, the manifest %d", len(m.Layers), len(om.Layers))
	}
	wantData := []bool{true, false, false, false} // payload; big over the bound, lacking, lying
	for i, l := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		o := append([]ocispec.Descriptor{om.Config}, om.Layers...)[i]
		if l.Digest != o.Digest || l.Size != o.Size || l.MediaType != o.MediaType || !maps.Equal(l.Annotations, o.Annotations) {
			t.Errorf("descriptor %d: the copy has %+v, the manifest %+v", i, l, o)
		}
		inlined := i == 0 || wantData[i-1]
		if inlined && (!bytes.Equal(l.Data, blobs[l.Digest]) || int64(len(l.Data)) != l.Size) {
			t.Errorf("descriptor %d (%s): data %q, want its blob's %d bytes", i, l.MediaType, l.Data, l.Size)
		}
		if !inlined && l.Data != nil {
			t.Errorf("descriptor %d (%s) carries %d bytes of data, want none", i, l.MediaType, len(l.Data))
		}
	}
	// A bound that holds only the config: the payload stays plain.
	small, _, ok, err := InlineBlobs(ctx, raw, len(raw)+30, r)
	if err != nil || !ok || len(small) > len(raw)+30 || bytes.Contains(small, []byte(`"data":"eyJj`)) || !bytes.Contains(small, []byte(`"data":"e30="`)) {
		t.Errorf("a bound of %d: ok %v, %v, %d bytes:\n%s", len(raw)+30, ok, err, len(small), small)
	}
	// Nothing to inline, or a Docker manifest: no copy.
	none := ReaderFunc(func(context.Context, ocispec.Descriptor) ([]byte, error) { return nil, NotFound(fmt.Errorf("none")) })
	if _, _, ok, err := InlineBlobs(ctx, raw, MaxInlineManifest, none); ok || err != nil {
		t.Errorf("no blob to inline: ok %v, %v; want no copy", ok, err)
	}
	docker := bytes.Replace(raw, []byte(ocispec.MediaTypeImageManifest), []byte(MediaTypeDockerManifest), 1)
	if _, _, ok, err := InlineBlobs(ctx, docker, MaxInlineManifest, r); ok || err != nil {
		t.Errorf("a Docker manifest: ok %v, %v; want no copy", ok, err)
	}
	if _, _, _, err := InlineBlobs(ctx, []byte(`[1]`), MaxInlineManifest, r); err == nil {
		t.Error("a manifest that is no object: no error")
	}
}

func keys(m map[string]json.RawMessage) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}

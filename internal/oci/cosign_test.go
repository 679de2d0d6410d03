package oci

import (
	"testing"

	"github.com/opencontainers/go-digest"
)

func TestSignatureTag(t *testing.T) {
	d := digest.FromString("image")
	if got, want := SignatureTag(d), "sha256-"+d.Encoded()+".sig"; got != want {
		t.Fatalf("SignatureTag = %q, want %q", got, want)
	}
	if got, want := ReferrersTag(d), "sha256-"+d.Encoded(); got != want {
		t.Fatalf("ReferrersTag = %q, want %q", got, want)
	}
}

// TestParseCosignTag: cosign's tags are told by their tag alone, read back
// as they are written; a digest in a repository's name or a tag that only
// looks like one is no cosign tag.
func TestParseCosignTag(t *testing.T) {
	d := digest.FromString("image")
	hex := d.Encoded()
	for _, tc := range []struct {
		name string
		kind string
		ok   bool
	}{
		{"example.com/app:sha256-" + hex + ".sig", TagSignature, true},
		{"example.com/app:sha256-" + hex + ".att", TagAttestation, true},
		{"example.com/app:sha256-" + hex + ".sbom", TagSBOM, true},
		{"localhost:5000/app:sha256-" + hex + ".sig", TagSignature, true},
		{"example.com/app:sha256-" + hex, "", false},
		{"example.com/app:1.0", "", false},
		{"example.com/app", "", false},
		{"localhost:5000/app", "", false},
		{"example.com/sha256-" + hex + ".sig/app", "", false},
	} {
		tag, ok := ParseCosignTag(tc.name)
		if ok != tc.ok || tag.Kind != tc.kind {
			t.Errorf("ParseCosignTag(%q) = %+v, %v; want kind %q, %v", tc.name, tag, ok, tc.kind, tc.ok)
			continue
		}
		if ok && (tag.Image != d || tc.name[len(tc.name)-len(tag.String()):] != tag.String()) {
			t.Errorf("ParseCosignTag(%q) = %+v (%s); want image %s, written back as it was", tc.name, tag, tag, d)
		}
	}
	if tag, ok := ParseCosignTag("example.com/app:sha256-nothex.sig"); !ok || tag.Kind != TagSignature || tag.Image != "" {
		t.Errorf("a signature tag without a digest: %+v, %v; want a signature of no image", tag, ok)
	}
}

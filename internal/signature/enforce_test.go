package signature

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// TestEnforced: an image a rule applies to and no signature verifies is
// refused as an enforcing node refuses it, also under a policy of mode
// warn; one no rule applies to is taken.
func TestEnforced(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "cosign.pub"), string(pemOf(t, key.Public())))
	write(t, filepath.Join(dir, "policy.yaml"), "mode: warn\nrules:\n  - images: [\"example.com/*\"]\n    keys: [cosign.pub]\n")
	pol, err := Load(filepath.Join(dir, "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	target := func(s string) ocispec.Descriptor {
		return ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString(s), Size: 1}
	}
	wants := []runtime.Want{{Name: "example.com/app:1", Target: target("app")}, {Name: "example.org/other:1", Target: target("other")}}
	states := []runtime.SourceState{{Source: "holdfast export", Complete: true, SignaturesRecorded: true, Images: wants}}
	got := StoreJudge(pol, nil).Enforced(context.Background(), states, wants)
	if len(got) != 2 || !strings.HasPrefix(got[0], string(Unsigned)) || got[1] != "" {
		t.Errorf("Enforced = %q, want the first unsigned and the second taken", got)
	}
}

package pass

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/reconcile"
	hfruntime "github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/signature"
)

// TestStatusSymlinkTarget: an archive symlinked into an images dir is shown
// with what it points to: "target" in status -o json (the other fields as
// they were).
func TestStatusSymlinkTarget(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "store", "app.tar")
	link := filepath.Join(dir, "images", "app.tar")
	plain := filepath.Join(dir, "images", "plain.tar")
	for _, d := range []string{filepath.Dir(real), filepath.Dir(link)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{real, plain} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	target := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("m"), Size: 1}
	srcs := []hfruntime.SourceState{
		{Lease: "holdfast/app", Source: link, Identity: "i1", Complete: true, Images: []hfruntime.Want{{Name: "example.com/app:1", Target: target}}},
		{Lease: "holdfast/plain", Source: plain, Identity: "i2", Complete: true, Images: []hfruntime.Want{{Name: "example.com/plain:1", Target: target}}},
	}
	imgs := []hfruntime.ImageDetail{
		{Image: hfruntime.Image{Name: "example.com/app:1", Target: target}},
		{Image: hfruntime.Image{Name: "example.com/plain:1", Target: target}},
	}
	st := statusOf(imgs, srcs)
	addTargets(&st)
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Sources []map[string]any `json:"sources"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	for _, s := range out.Sources {
		for _, k := range []string{"path", "lease", "identity", "complete", "images"} {
			if _, ok := s[k]; !ok {
				t.Errorf("source %v lacks %q", s, k)
			}
		}
		switch s["path"] {
		case link:
			if s["target"] != real {
				t.Errorf("symlinked source: target %v, want %s", s["target"], real)
			}
		case plain:
			if _, ok := s["target"]; ok {
				t.Errorf("plain source has a target: %v", s)
			}
		}
	}
}

// TestStatusRefusedAsPassRefuses: under enforce, status lists as refused
// what the plan of a pass refuses, a name@digest only where no tag of its
// image is refused by the same source, each with its verdict; every image a
// source wants gets a verdict.
func TestStatusRefusedAsPassRefuses(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cosign.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	polPath := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(polPath, []byte("mode: enforce\nrules:\n  - images: [\"example.com/app*\", \"example.com/bare*\"]\n    keys: [cosign.pub]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pol, err := signature.Load(polPath)
	if err != nil {
		t.Fatal(err)
	}
	app := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("app"), Size: 1}
	bare := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("bare"), Size: 1}
	other := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("other"), Size: 1}
	srcs := []hfruntime.SourceState{
		{Lease: "holdfast/a", Source: "/images/a.tar", Identity: "i1", Complete: true, SignaturesRecorded: true, Images: []hfruntime.Want{
			{Name: "example.com/app:1", Target: app}, {Name: "example.com/app@" + app.Digest.String(), Target: app},
			{Name: "example.com/bare@" + bare.Digest.String(), Target: bare},
			{Name: "example.org/other:1", Target: other},
		}},
	}
	imgs := []hfruntime.ImageDetail{
		{Image: hfruntime.Image{Name: "example.com/app:1", Target: app}},
		{Image: hfruntime.Image{Name: "example.org/other:1", Target: other}},
	}
	records := []hfruntime.Image{imgs[0].Image, imgs[1].Image}
	judge := signature.Judge{Policy: pol}
	judgment := judge.For(context.Background(), srcs)
	st := statusOf(imgs, srcs)
	addSignatures(judgment, srcs, records, &st)

	var got []string
	for _, r := range st.Refused {
		if r.Signature.State != signature.Unsigned {
			t.Errorf("refused %s: verdict %s, want unsigned", r.Name, r.Signature)
		}
		got = append(got, r.Name+" "+r.Target+" "+r.Source)
	}
	want := []string{
		"example.com/app:1 " + app.Digest.String() + " /images/a.tar",
		"example.com/bare@" + bare.Digest.String() + " " + bare.Digest.String() + " /images/a.tar",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("refused:\n%q\nwant:\n%q", got, want)
	}
	var planned []string
	for _, r := range reconcile.Tagged(planAsIs(srcs, records, nil, judgment.Refuses).Refusals) {
		planned = append(planned, r.Name+" "+r.Target+" "+r.Source)
	}
	if !reflect.DeepEqual(planned, want) {
		t.Errorf("the plan refuses %q, status %q", planned, got)
	}
	for _, img := range st.Images {
		wantState := signature.Unsigned
		if img.Name == "example.org/other:1" {
			wantState = signature.Unchecked
		}
		if img.Signature == nil || img.Signature.State != wantState {
			t.Errorf("image %s: verdict %v, want %s", img.Name, img.Signature, wantState)
		}
	}
}

// TestStatusLeavesOutSignatureRecords: the records a source names an
// image's signatures by (Want.Signs) are no images: status lists neither
// them nor counts them among its source's images; the image is listed.
func TestStatusLeavesOutSignatureRecords(t *testing.T) {
	target := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("image"), Size: 1}
	sig := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("sig"), Size: 1}
	sigName := "example.com/app:sha256-" + target.Digest.Encoded() + ".sig"
	srcs := []hfruntime.SourceState{{Lease: "holdfast/app", Source: "/images/app.tar", Identity: "i1", Complete: true, Intact: true,
		Images: []hfruntime.Want{{Name: "example.com/app:1", Target: target}, {Name: sigName, Target: sig, Signs: target.Digest}}}}
	imgs := []hfruntime.ImageDetail{
		{Image: hfruntime.Image{Name: "example.com/app:1", Target: target}},
		{Image: hfruntime.Image{Name: sigName, Target: sig}},
	}
	st := statusOf(imgs, srcs)
	if len(st.Images) != 1 || st.Images[0].Name != "example.com/app:1" || len(st.Images[0].Sources) != 1 {
		t.Errorf("status images %+v, want example.com/app:1 alone, wanted by its source", st.Images)
	}
	if len(st.Sources) != 1 || st.Sources[0].Images != 1 {
		t.Errorf("status sources %+v, want one source of 1 image", st.Sources)
	}
}

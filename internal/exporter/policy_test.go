package exporter_test

import (
	"context"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/exporter"
	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/runtime/fake"
)

// unsignedRefused refuses, as a policy whose rule covers every image, each
// image no source state lists a signature manifest for.
type unsignedRefused struct{ states []runtime.SourceState }

func (p *unsignedRefused) Enforced(_ context.Context, states []runtime.SourceState, wants []runtime.Want) []string {
	p.states = states
	out := make([]string, len(wants))
	for i, w := range wants {
		signed := false
		for _, st := range states {
			signed = signed || len(st.Signatures[w.Target.Digest]) > 0
		}
		if !signed {
			out[i] = "unsigned: no signature found"
		}
	}
	return out
}

// TestExportPolicy: under a policy, the images it refuses are named with
// their digest and why; without SignedOnly they are written, with it they
// are left out (their blobs too) and the others written; SignedOnly over
// refused images alone is an error naming them. The policy judges an image
// signed only by a record named with its cosign tag by that signature.
func TestExportPolicy(t *testing.T) {
	signed := build(t, fixture.ImageSpec{Names: []string{"example.com/signed:1"}, Layers: fixture.UniformLayers(1, 8<<10, false, 81)})
	bare := build(t, fixture.ImageSpec{Names: []string{"example.com/bare:1"}, Layers: fixture.UniformLayers(1, 8<<10, false, 82)})
	rt := fake.New()
	importArchive(t, rt, "/images/both.tar", ociArchive(t, fixture.OCIOptions{}, signed, bare))
	putSignatureRecord(t, rt, "example.com/signed", signed.Target.Digest)
	bareLayer := bare.ManifestFor(fixture.HostPlatform()).Layers[0].Digest()

	pol := &unsignedRefused{}
	out, p := export(t, rt, exporter.Selection{Patterns: patterns(t, "example.com/*"), Policy: pol})
	if len(p.Refused) == 0 {
		t.Fatalf("refused %v; want the bare image's names", p.Refused)
	}
	for _, r := range p.Refused {
		if !strings.HasPrefix(r.Name, "example.com/bare") || r.Target.Digest != bare.Target.Digest || !strings.Contains(r.String(), bare.Target.Digest.String()+"): unsigned") {
			t.Errorf("refused %s; want the bare image's names alone, each with its digest and why", r)
		}
	}
	if last := pol.states[len(pol.states)-1]; len(last.Images) != len(p.Images) || len(last.Signatures[signed.Target.Digest]) != 1 {
		t.Errorf("the policy was given %d images and signatures %v for the export; want %d and the .sig record's", len(last.Images), last.Signatures, len(p.Images))
	}
	if !strings.Contains(string(out), bareLayer.Encoded()) {
		t.Error("without SignedOnly the refused image is not written")
	}

	out, p = export(t, rt, exporter.Selection{Patterns: patterns(t, "example.com/*"), Policy: pol, SignedOnly: true})
	res := importArchive(t, fake.New(), "/images/export.tar", out)
	for _, w := range res.Images {
		if strings.HasPrefix(w.Name, "example.com/bare") {
			t.Errorf("with SignedOnly the archive names %s", w.Name)
		}
	}
	if len(res.Images) == 0 || len(p.Refused) == 0 || strings.Contains(string(out), bareLayer.Encoded()) {
		t.Errorf("with SignedOnly: imported back %v, refused %v, the bare layer written %v; want the signed image alone, the bare one named",
			wantsOf(res.Images), p.Refused, strings.Contains(string(out), bareLayer.Encoded()))
	}

	_, _, err := tryExport(rt, exporter.Selection{Patterns: patterns(t, "example.com/bare"), Policy: pol, SignedOnly: true})
	if err == nil || !strings.Contains(err.Error(), "refuses every image") || !strings.Contains(err.Error(), bare.Target.Digest.String()) {
		t.Errorf("SignedOnly over refused images alone: %v; want an error naming them", err)
	}
}

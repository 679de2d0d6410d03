package exporter

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/runtime"
)

// Policy judges the chosen images by their signatures: the signature
// policy in force, which the caller verifies with (the export links no
// verification code; signature.Judge is one).
type Policy interface {
	// Enforced says why a node enforcing the policy refuses each of wants
	// ("" where it takes it). states are the store's sources and, last, one
	// that wants them with every signature manifest the store keeps for
	// them, so that an image chosen by its record alone is judged by the
	// signatures the export carries.
	Enforced(ctx context.Context, states []runtime.SourceState, wants []runtime.Want) []string
}

// Refusal is an image the policy refuses, and why (its verdict).
type Refusal struct {
	Image
	Why string
}

// String is "name (digest): why".
func (r Refusal) String() string {
	return fmt.Sprintf("%s (%s): %s", r.Name, r.Target.Digest, r.Why)
}

// screen judges imgs by sel.Policy: the images it refuses, sorted by name,
// and, with SignedOnly, the others alone. Every image chosen refused under
// SignedOnly is an error naming them.
func screen(ctx context.Context, sel Selection, imgs []Image, records []runtime.Image, states []runtime.SourceState) ([]Image, []Refusal, error) {
	if sel.Policy == nil {
		return imgs, nil, nil
	}
	wants := make([]runtime.Want, len(imgs))
	for i, img := range imgs {
		wants[i] = runtime.Want{Name: img.Name, Target: img.Target}
	}
	var refused []Refusal
	for i, why := range sel.Policy.Enforced(ctx, append(slices.Clone(states), exportState(imgs, records, states)), wants) {
		if why != "" {
			refused = append(refused, Refusal{Image: imgs[i], Why: why})
		}
	}
	slices.SortFunc(refused, func(a, b Refusal) int { return strings.Compare(a.Name, b.Name) })
	if !sel.SignedOnly || len(refused) == 0 {
		return imgs, refused, nil
	}
	kept := slices.DeleteFunc(slices.Clone(imgs), func(img Image) bool {
		return slices.ContainsFunc(refused, func(r Refusal) bool { return r.Name == img.Name })
	})
	if len(kept) == 0 {
		lines := make([]string, len(refused))
		for i, r := range refused {
			lines[i] = "  " + r.String()
		}
		return nil, refused, fmt.Errorf("no image to export: the signature policy refuses every image chosen:\n%s", strings.Join(lines, "\n"))
	}
	return kept, refused, nil
}

// exportState is the images chosen as a source state of their own: each
// name at its target, with the signature manifests the sources list for it
// and the records named with its cosign tag (signatureCandidates), which
// the export writes beside it.
func exportState(imgs []Image, records []runtime.Image, states []runtime.SourceState) runtime.SourceState {
	candidates := signatureCandidates(records, states)
	st := runtime.SourceState{Source: "holdfast export", Complete: true, SignaturesRecorded: true,
		Signatures: map[digest.Digest][]ocispec.Descriptor{}}
	for _, img := range imgs {
		st.Images = append(st.Images, runtime.Want{Name: img.Name, Target: img.Target})
		if cs, ok := candidates[img.Target.Digest]; ok {
			st.Signatures[img.Target.Digest] = cs
		}
	}
	return st
}

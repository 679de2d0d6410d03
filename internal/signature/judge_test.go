package signature

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/signature/sigtest"
)

// memStore is a content store of blobs in memory, counting reads.
type memStore struct {
	blobs map[digest.Digest][]byte
	reads int
}

func (m *memStore) ReadBlob(_ context.Context, d ocispec.Descriptor) ([]byte, error) {
	m.reads++
	if b, ok := m.blobs[d.Digest]; ok {
		return b, nil
	}
	return nil, errors.New("not found")
}

// storeScene is an image signed by the policy's key whose signature a
// source's state lists, its blobs in a store.
func storeScene(tb testing.TB) (*Policy, []runtime.SourceState, *memStore, runtime.Want) {
	k := sigtest.NewKey(tb)
	pol := loadPolicy(tb, sigtest.PublicPEM(tb, k), "  - images: [\"registry.example/team/*\"]\n    keys: [cosign.pub]\n")
	img := image(repo+":1", "app")
	sig := sigtest.Legacy(tb, repo, img.Target.Digest, k)
	desc := sig.Descriptor
	desc.Annotations = map[string]string{ocispec.AnnotationRefName: repo + ":" + oci.SignatureTag(img.Target.Digest)}
	w := runtime.Want{Name: img.Name, Target: img.Target}
	states := []runtime.SourceState{{Lease: "l", Images: []runtime.Want{w},
		Signatures: map[digest.Digest][]ocispec.Descriptor{img.Target.Digest: {desc}}}}
	return pol, states, &memStore{blobs: sig.Blobs}, w
}

// TestJudgeRemembers: the store's signature verifies the image; judged
// again with the same policy nothing is read, nor with the policy file
// loaded anew unchanged (the memo is keyed by what the rule says); once
// the rule changes (here its line, which its reasons name) it is read and
// verified again.
func TestJudgeRemembers(t *testing.T) {
	pol, states, store, w := storeScene(t)
	var j Judge
	if v := judgeOf(&j, pol, store, states).Of(w.Name, w.Target); v.State != Verified {
		t.Fatalf("verdict %s, want verified", v)
	}
	reads := store.reads
	if reads == 0 {
		t.Fatal("nothing was read from the store")
	}
	if v := judgeOf(&j, pol, store, states).Of(w.Name, w.Target); v.State != Verified || store.reads != reads {
		t.Errorf("judged again: %s after %d more reads, want verified after none", v, store.reads-reads)
	}
	again, err := Load(pol.Path)
	if err != nil {
		t.Fatal(err)
	}
	if v := judgeOf(&j, again, store, states).Of(w.Name, w.Target); v.State != Verified || store.reads != reads {
		t.Errorf("under the same policy loaded anew: %s after %d more reads, want verified after none", v, store.reads-reads)
	}
	text, err := os.ReadFile(pol.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pol.Path, append([]byte("# moved\n"), text...), 0o644); err != nil {
		t.Fatal(err)
	}
	changed, err := Load(pol.Path)
	if err != nil {
		t.Fatal(err)
	}
	v := judgeOf(&j, changed, store, states).Of(w.Name, w.Target)
	if v.State != Verified || store.reads == reads || !strings.Contains(v.Reason, fmt.Sprintf(":%d", changed.Rules[0].Line)) {
		t.Errorf("under a changed policy: %s, %d more reads, want verified again under line %d", v, store.reads-reads, changed.Rules[0].Line)
	}
	unsigned := runtime.Want{Name: repo + ":2", Target: image(repo+":2", "bare").Target}
	if v := judgeOf(&j, pol, store, states).Of(unsigned.Name, unsigned.Target); v.State != Unsigned {
		t.Errorf("an image no state lists a signature for: %s, want unsigned", v)
	}
}

// judgeOf is the judgment of pol, through j, on the images states want,
// whose signatures are in store.
func judgeOf(j *Judge, pol *Policy, store *memStore, states []runtime.SourceState) *Judgment {
	j.Policy, j.Blobs = pol, store
	return j.For(context.Background(), states)
}

// BenchmarkVerdict is the cost a pass pays per image the first time it
// judges it: read its signature manifest and payload from the store (here
// memory) and verify an ECDSA P-256 cosign signature.
func BenchmarkVerdict(b *testing.B) {
	pol, states, store, w := storeScene(b)
	for b.Loop() {
		var j Judge
		if v := judgeOf(&j, pol, store, states).Of(w.Name, w.Target); v.State != Verified {
			b.Fatal(v)
		}
	}
}

// TestJudgeSignatureRecords: a want that names an image's signatures
// (Want.Signs) takes the image's verdict under enforce: allowed while the
// image is verified, refused with it once the image is unsigned (its
// signature gone from the state), refused when no state names the image;
// and it is no name of the image: judging the image does not judge it.
func TestJudgeSignatureRecords(t *testing.T) {
	pol, states, store, w := storeScene(t)
	pol.Mode = Enforce
	sig := states[0].Signatures[w.Target.Digest][0]
	record := runtime.Want{Name: repo + ":" + oci.SignatureTag(w.Target.Digest), Target: ocispec.Descriptor{MediaType: sig.MediaType, Digest: sig.Digest, Size: sig.Size}, Signs: w.Target.Digest}
	states[0].Images = append(states[0].Images, record)
	var j Judge
	g := judgeOf(&j, pol, store, states)
	if why, refused := g.Refuses(record); refused {
		t.Errorf("the record of a verified image's signature is refused: %s", why)
	}
	if v := g.Of(w.Name, w.Target); v.State != Verified {
		t.Errorf("the image beside its signature's record: %s, want verified", v)
	}
	unsigned := []runtime.SourceState{{Lease: "l", Images: states[0].Images, SignaturesRecorded: true}}
	g = judgeOf(&j, pol, store, unsigned)
	if why, refused := g.Refuses(record); !refused || !strings.HasPrefix(why, string(Unsigned)) || !strings.Contains(why, w.Name) {
		t.Errorf("the record of an unsigned image's signature: refused %v (%s), want refused as the image %s is", refused, why, w.Name)
	}
	if _, refused := g.Refuses(w); !refused {
		t.Errorf("the unsigned image is not refused")
	}
	alone := []runtime.SourceState{{Lease: "l", Images: []runtime.Want{record}, Signatures: states[0].Signatures, SignaturesRecorded: true}}
	if _, refused := judgeOf(&j, pol, store, alone).Refuses(record); !refused {
		t.Errorf("the record of the signature of an image no state names is not refused")
	}
	pol.Mode = Warn
	if _, refused := judgeOf(&j, pol, store, unsigned).Refuses(record); refused {
		t.Errorf("under warn the record of an unsigned image's signature is refused")
	}
}

package sigtest

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"google.golang.org/protobuf/proto"
)

// The annotations cosign puts on a keyless simple-signing layer.
const (
	AnnotationCertificate = "dev.sigstore.cosign/certificate"
	AnnotationChain       = "dev.sigstore.cosign/chain"
	AnnotationRekorBundle = "dev.sigstore.cosign/bundle"
	AnnotationTimestamp   = "dev.sigstore.cosign/rfc3161timestamp"
)

// NewVirtualSigstore is sigstore-go's test Fulcio, Rekor and timestamp
// authority, all in memory.
func NewVirtualSigstore(t testing.TB) *ca.VirtualSigstore {
	t.Helper()
	vs, err := ca.NewVirtualSigstore()
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// TrustedRoot is the sigstore TrustedRoot JSON of vs: its Fulcio and
// timestamp authority, and its Rekor and CT logs when asked.
func TrustedRoot(t testing.TB, vs *ca.VirtualSigstore, withRekor, withCT bool) []byte {
	t.Helper()
	// The virtual sigstore keeps the hex of a log's ID as its ID; a
	// trusted root holds the ID itself.
	logs := func(m map[string]*root.TransparencyLog) map[string]*root.TransparencyLog {
		out := map[string]*root.TransparencyLog{}
		for id, l := range m {
			c := *l
			raw, err := hex.DecodeString(id)
			if err != nil {
				t.Fatal(err)
			}
			c.ID = raw
			out[id] = &c
		}
		return out
	}
	rekor, ct := map[string]*root.TransparencyLog{}, map[string]*root.TransparencyLog{}
	if withRekor {
		rekor = logs(vs.RekorLogs())
	}
	if withCT {
		ct = logs(vs.CTLogs())
	}
	tr, err := root.NewTrustedRoot(root.TrustedRootMediaType01, vs.FulcioCertificateAuthorities(), ct,
		vs.TimestampingAuthorities(), rekor)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := tr.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// WithSET gives a Rekor v1 entry the log's signed entry timestamp, and
// returns it with the Rekor payload the SET signs.
func WithSET(t testing.TB, vs *ca.VirtualSigstore, e *tlog.Entry) (*protorekor.TransparencyLogEntry, tlog.RekorPayload) {
	t.Helper()
	tle := proto.Clone(e.TransparencyLogEntry()).(*protorekor.TransparencyLogEntry)
	rp := tlog.RekorPayload{
		Body:           base64.StdEncoding.EncodeToString(tle.CanonicalizedBody),
		IntegratedTime: tle.IntegratedTime,
		LogIndex:       tle.LogIndex,
		LogID:          hex.EncodeToString(tle.LogId.KeyId),
	}
	set, err := vs.RekorSignPayload(rp)
	if err != nil {
		t.Fatal(err)
	}
	var kv struct{ Kind, APIVersion string }
	if err := json.Unmarshal(tle.CanonicalizedBody, &kv); err != nil {
		t.Fatal(err)
	}
	tle.KindVersion = &protorekor.KindVersion{Kind: kv.Kind, Version: kv.APIVersion}
	tle.InclusionPromise = &protorekor.InclusionPromise{SignedEntryTimestamp: set}
	return tle, rp
}

func pemCert(raw []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: raw}))
}

// KeylessAnnotations are the annotations cosign sign puts on the layer of a
// keyless signature of payload p by vs's Fulcio certificate for subject from
// issuer: the signature, the certificate and chain, and, when times, the
// Rekor bundle and the RFC 3161 timestamp.
func KeylessAnnotations(t testing.TB, vs *ca.VirtualSigstore, p []byte, issuer, subject string, times bool) map[string]string {
	t.Helper()
	ent, err := vs.Sign(subject, issuer, p)
	if err != nil {
		t.Fatal(err)
	}
	vc, _ := ent.VerificationContent()
	sc, _ := ent.SignatureContent()
	fulcio := vs.FulcioCertificateAuthorities()[0].(*root.FulcioCertificateAuthority)
	ann := map[string]string{
		AnnotationSignature:   base64.StdEncoding.EncodeToString(sc.Signature()),
		AnnotationCertificate: pemCert(vc.Certificate().Raw),
		AnnotationChain:       pemCert(fulcio.Intermediates[0].Raw) + pemCert(fulcio.Root.Raw),
	}
	if times {
		entries, _ := ent.TlogEntries()
		tle, rp := WithSET(t, vs, entries[0])
		rb, err := json.Marshal(struct {
			SignedEntryTimestamp []byte
			Payload              tlog.RekorPayload
		}{tle.InclusionPromise.SignedEntryTimestamp, rp})
		if err != nil {
			t.Fatal(err)
		}
		ts, _ := ent.Timestamps()
		tsa, err := json.Marshal(struct{ SignedRFC3161Timestamp []byte }{ts[0]})
		if err != nil {
			t.Fatal(err)
		}
		ann[AnnotationRekorBundle] = string(rb)
		ann[AnnotationTimestamp] = string(tsa)
	}
	return ann
}

// LegacyKeyless is the .sig manifest cosign sign pushes, keyless, for the
// image of repo with this digest: vs certifies subject from issuer, logs
// the signature in its Rekor and timestamps it.
func LegacyKeyless(t testing.TB, vs *ca.VirtualSigstore, repo string, image digest.Digest, issuer, subject string) Manifest {
	t.Helper()
	p := Payload(t, repo, image)
	layer := ocispec.Descriptor{MediaType: MediaTypeSimpleSigning, Digest: digest.FromBytes(p), Size: int64(len(p)),
		Annotations: KeylessAnnotations(t, vs, p, issuer, subject, true)}
	return manifest(t, []ocispec.Descriptor{layer}, [][]byte{p})
}

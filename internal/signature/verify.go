package signature

import (
	"bytes"
	"context"
	"crypto"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/verify"
	sigsig "github.com/sigstore/sigstore/pkg/signature"

	"github.com/holdfast-project/holdfast/internal/oci"
	"github.com/holdfast-project/holdfast/internal/signature/layout"
)

// Verify says whether one of sigs, found for image (layout.Index.Find),
// verifies under what rule trusts (its keys, its keyless trusted root and
// identities) and names the image's digest: Verified, with By the key's
// file or "<issuer> <subject>" of a keyless signature's certificate;
// Unsigned without signatures; Invalid when none verifies, with Reason the
// most telling failure among them.
//
// A signature made with a key is verified with the key alone
// (verify.WithNoObserverTimestamps): a Rekor entry or timestamp it carries
// is neither required nor checked, as with Zarf's air-gap defaults.
//
// A keyless one needs the trusted root and a trusted identity, and at least
// one observer timestamp verified against the root: a Rekor entry's
// integrated time (from its SET) or an RFC 3161 timestamp. Its certificate
// must have been valid at each of them. Without one it is invalid: holdfast
// never takes the current time, at which a Fulcio certificate has long
// expired. When the root lists Rekor logs, an entry in one is required;
// when it lists CT logs, an SCT in the certificate.
func Verify(ctx context.Context, image ocispec.Descriptor, sigs []layout.Signature, rule *Rule) Verdict {
	if len(sigs) == 0 {
		return Verdict{State: Unsigned, Reason: "no signature found"}
	}
	v := newVerifier(rule)
	var worst *failure
	for _, s := range sigs {
		if err := ctx.Err(); err != nil {
			return Verdict{State: Invalid, Reason: err.Error()}
		}
		by, f := v.check(image.Digest, s)
		if f == nil {
			return Verdict{State: Verified, By: by}
		}
		f.msg = sigName(s) + ": " + f.msg
		if worst == nil || f.rank > worst.rank {
			worst = f
		}
	}
	reason := worst.msg
	if len(sigs) > 1 {
		reason = fmt.Sprintf("none of %d signatures verifies; %s", len(sigs), reason)
	}
	return Verdict{State: Invalid, Reason: reason}
}

// VerifyBlob says whether bundleJSON, a sigstore bundle made by signing a
// file (cosign sign-blob --new-bundle-format; Zarf's zarf.bundle.sig over
// zarf.yaml), verifies under what rule trusts as a signature of blob, as
// Verify verifies an image's.
func VerifyBlob(ctx context.Context, bundleJSON, blob []byte, rule *Rule) Verdict {
	if err := ctx.Err(); err != nil {
		return Verdict{State: Invalid, Reason: err.Error()}
	}
	s := layout.Signature{Kind: layout.KindBlob, Content: bundleJSON, Blob: blob}
	by, f := newVerifier(rule).check("", s)
	if f != nil {
		return Verdict{State: Invalid, Reason: f.msg}
	}
	return Verdict{State: Verified, By: by}
}

// failure is why a signature does not verify; the higher its rank, the more
// it tells.
type failure struct {
	rank int
	msg  string
}

const (
	rankUntrusted  = iota // no trust to verify this kind of signature with
	rankMalformed         // the signature cannot be read
	rankSignature         // sigstore-go refuses it: another key, tampered, untrusted certificate or time
	rankIdentity          // genuine, by an identity not trusted
	rankOtherImage        // genuine and trusted, but not a signature of this image
)

func fail(rank int, format string, args ...any) *failure {
	return &failure{rank: rank, msg: fmt.Sprintf(format, args...)}
}

// sigName names a signature in a reason.
func sigName(s layout.Signature) string {
	return fmt.Sprintf("%s signature %s", s.Kind, s.Layer.Digest)
}

// verifier is what a rule trusts, made ready for sigstore-go.
type verifier struct {
	keys       []keyVerifier
	keyless    *verify.Verifier
	identities verify.CertificateIdentities
	// noKeyless says why keyless signatures cannot be verified, if so.
	noKeyless string
}

type keyVerifier struct {
	name string
	v    *verify.Verifier
	err  error
}

// newVerifier readies what rule trusts: its keys, each named by its file,
// and its keyless trusted root and identities.
func newVerifier(rule *Rule) *verifier {
	v := &verifier{}
	for i, k := range rule.Keys {
		kv := keyVerifier{name: k.Path}
		if kv.name == "" {
			kv.name = fmt.Sprintf("key %d", i+1)
		}
		kv.v, kv.err = keyOnly(k.Public)
		v.keys = append(v.keys, kv)
	}
	var kl Keyless
	if rule.Keyless != nil {
		kl = *rule.Keyless
	}
	for i, id := range kl.Identities {
		ci, err := verify.NewShortCertificateIdentity(id.Issuer, id.IssuerRegExp, id.Subject, id.SubjectRegExp)
		if err != nil {
			v.noKeyless = fmt.Sprintf("identity %d: %v", i+1, err)
			return v
		}
		v.identities = append(v.identities, ci)
	}
	switch {
	case len(kl.TrustedRootJSON) == 0:
		v.noKeyless = "it is keyless and no trusted root is given"
	case len(v.identities) == 0:
		v.noKeyless = "it is keyless and no identity is trusted"
	default:
		tr, err := root.NewTrustedRootFromJSON(kl.TrustedRootJSON)
		if err != nil {
			v.noKeyless = fmt.Sprintf("trusted root: %v", err)
			return v
		}
		opts := []verify.VerifierOption{verify.WithObserverTimestamps(1), verify.WithoutStatementPredicate()}
		if len(tr.RekorLogs()) > 0 {
			opts = append(opts, verify.WithTransparencyLog(1))
		}
		if len(tr.CTLogs()) > 0 {
			opts = append(opts, verify.WithSignedCertificateTimestamps(1))
		}
		if v.keyless, err = verify.NewVerifier(tr, opts...); err != nil {
			v.noKeyless = fmt.Sprintf("trusted root: %v", err)
		}
	}
	return v
}

// keyOnly is a verifier of signatures made with pub, which needs no
// timestamp: the key has no validity period.
func keyOnly(pub crypto.PublicKey) (*verify.Verifier, error) {
	sv, err := sigsig.LoadVerifier(pub, crypto.SHA256)
	if err != nil {
		return nil, err
	}
	key := root.NewExpiringKey(sv, time.Time{}, time.Time{})
	// One key at a time: whatever key hint the signature gives, this is
	// the key it is checked with.
	tm := root.NewTrustedPublicKeyMaterial(func(string) (root.TimeConstrainedVerifier, error) { return key, nil })
	return verify.NewVerifier(tm, verify.WithNoObserverTimestamps(), verify.WithoutStatementPredicate())
}

// check verifies one signature; it returns who signed, or why it fails.
func (v *verifier) check(image digest.Digest, s layout.Signature) (string, *failure) {
	e, err := entity(s)
	if err != nil {
		return "", fail(rankMalformed, "%v", err)
	}
	vc, err := e.VerificationContent()
	if err != nil {
		return "", fail(rankMalformed, "%v", err)
	}
	var (
		res *verify.VerificationResult
		by  string
		f   *failure
	)
	if vc.Certificate() != nil {
		res, by, f = v.checkKeyless(e, s)
	} else {
		res, by, f = v.checkKey(e, s)
	}
	if f != nil {
		return "", f
	}
	if s.Kind == layout.KindBlob {
		return by, nil // sigstore-go checked the signature over the blob itself
	}
	if err := signedFor(image, s, res); err != nil {
		return "", fail(rankOtherImage, "signed by %s, but %v", by, err)
	}
	return by, nil
}

func (v *verifier) checkKey(e *bundle.Bundle, s layout.Signature) (*verify.VerificationResult, string, *failure) {
	if len(v.keys) == 0 {
		return nil, "", fail(rankUntrusted, "it is signed with a key and no key is trusted")
	}
	var errs []string
	for _, k := range v.keys {
		if k.err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", k.name, k.err))
			continue
		}
		res, err := k.v.Verify(e, verify.NewPolicy(artifact(s), verify.WithKey()))
		if err == nil {
			return res, k.name, nil
		}
		errs = append(errs, fmt.Sprintf("%s: %v", k.name, err))
	}
	return nil, "", fail(rankSignature, "no trusted key verifies it (%s)", strings.Join(errs, "; "))
}

// checkKeyless verifies the certificate, the timestamps and the signature,
// then matches the certificate against the trusted identities with
// sigstore-go's matcher, as its policy would, to tell who signed when no
// identity matches.
func (v *verifier) checkKeyless(e *bundle.Bundle, s layout.Signature) (*verify.VerificationResult, string, *failure) {
	if v.noKeyless != "" {
		return nil, "", fail(rankUntrusted, "%s", v.noKeyless)
	}
	res, err := v.keyless.Verify(e, verify.NewPolicy(artifact(s), verify.WithoutIdentitiesUnsafe()))
	if err != nil {
		return nil, "", fail(rankSignature, "%v", err)
	}
	c := res.Signature.Certificate
	if c == nil {
		return nil, "", fail(rankSignature, "verified without a certificate")
	}
	by := strings.TrimSpace(c.Issuer + " " + c.SubjectAlternativeName)
	if _, err := v.identities.Verify(*c); err != nil {
		return nil, "", fail(rankIdentity, "signed by %s, which is no trusted identity", by)
	}
	return res, by, nil
}

// artifact is what sigstore-go checks the signature over: a legacy
// signature's payload, or a bundle's own statement, whose subject
// signedFor checks once sigstore-go has verified it.
func artifact(s layout.Signature) verify.ArtifactPolicyOption {
	switch s.Kind {
	case layout.KindSimpleSigning:
		return verify.WithArtifact(bytes.NewReader(s.Content))
	case layout.KindBlob:
		return verify.WithArtifact(bytes.NewReader(s.Blob))
	}
	return verify.WithoutArtifactUnsafe()
}

// signedFor checks that what a verified signature signs names image: the
// payload's docker-manifest-digest, or the statement's subject.
func signedFor(image digest.Digest, s layout.Signature, res *verify.VerificationResult) error {
	if s.Kind == layout.KindSimpleSigning {
		got, err := layout.PayloadImage(s.Content)
		if err != nil {
			return err
		}
		if got != image.String() {
			return fmt.Errorf("for image %s", got)
		}
		return nil
	}
	st := res.Statement
	if st == nil {
		return errors.New("the bundle holds no statement")
	}
	if st.GetPredicateType() != oci.PredicateCosignSign {
		return fmt.Errorf("the statement is a %s attestation, not a signature", st.GetPredicateType())
	}
	var named []string
	for _, sub := range st.GetSubject() {
		for alg, hex := range sub.GetDigest() {
			if alg == image.Algorithm().String() && hex == image.Encoded() {
				return nil
			}
			named = append(named, alg+":"+hex)
		}
	}
	return fmt.Errorf("for image %s", strings.Join(named, ", "))
}

// Package signature decides whether an image is signed as the signature
// policy requires: the policy (which keys, or which keyless identities, may
// sign which images, and whether a failing image is refused, enforce, or
// only reported, warn), the offline verification of cosign signatures with
// sigstore-go, and the one verdict each image gets, for an archive being
// imported or verified (Check) and for what the store's sources want
// (Judge), and the rule of the policy in force in a namespace, which every
// command that writes there judges by (Adopt). Finding the signatures is
// package layout's.
//
// A policy file is YAML:
//
//	mode: enforce          # enforce | warn (default warn)
//	rules:                 # the first rule one of whose patterns matches a name applies
//	  - images: ["registry.example.com/platform/*"]
//	    keys: ["keys/platform.pub"]                    # PEM public keys; any one may sign
//	  - images: ["*"]
//	    keyless:
//	      trustedRoot: /etc/holdfast/trusted_root.json # sigstore TrustedRoot JSON
//	      identities:
//	        - issuer: "https://token.actions.githubusercontent.com"
//	          subjectRegExp: "^https://github.com/example/.*$"
//
// Patterns are those of pin lists (package pattern), plus "*" alone for every
// image. Relative key and trusted-root paths are relative to the policy
// file's directory. Load reports every mistake it finds, each as a LineError
// ("FILE:LINE: cause").
package signature

import (
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/opencontainers/go-digest"

	"github.com/holdfast-project/holdfast/internal/lineerr"
	"github.com/holdfast-project/holdfast/internal/pattern"
)

// Mode says what becomes of an image whose verdict is neither verified nor
// unchecked.
type Mode string

const (
	Enforce Mode = "enforce" // it is refused
	Warn    Mode = "warn"    // it is imported, and the verdict reported
)

// Refuses reports whether an image with verdict v is refused: under Enforce,
// every verdict but verified and unchecked (a zero verdict too); under Warn
// (or the zero Mode), none.
func (m Mode) Refuses(v Verdict) bool {
	return m == Enforce && v.State != Verified && v.State != Unchecked
}

// Policy is a parsed policy file.
type Policy struct {
	Mode  Mode
	Rules []Rule // in file order; at least one
	Path  string // the file, as given to Load
}

// Rule says who may sign the images it matches. A rule has keys, keyless, or
// both: a signature that verifies by any one of them will do.
type Rule struct {
	Line    int               // of the rule in the policy file
	Images  []pattern.Pattern // at least one
	Keys    []Key
	Keyless *Keyless

	key string // ruleKey, set by Load
}

// Key is a public key that may sign.
type Key struct {
	Path   string           // the key file, resolved against the policy file's directory
	Public crypto.PublicKey // *ecdsa.PublicKey (P-256, P-384, P-521), ed25519.PublicKey or *rsa.PublicKey (2048 bits or more)
	PEM    []byte           // the key's "PUBLIC KEY" PEM block, re-encoded
}

// Keyless is a sigstore trust root and the identities whose certificates may
// sign.
type Keyless struct {
	TrustedRoot     string // the file, resolved against the policy file's directory
	TrustedRootJSON []byte // its bytes: JSON whose mediaType is TrustedRootMediaType
	Identities      []Identity
}

// Identity is a certificate identity that may sign: an issuer given exactly
// (Issuer) or by a regular expression (IssuerRegExp), and likewise a subject.
// Exactly one of each pair is set; a regular expression compiles (Go syntax).
type Identity struct {
	Issuer, IssuerRegExp   string
	Subject, SubjectRegExp string
}

// RuleFor returns the first rule one of whose patterns matches name, once
// normalised (nginx:1 is docker.io/library/nginx:1). No rule (false), or a
// nil policy, means the image is unchecked. The CRI's sha256:<id> records are
// no image names: no rule matches them.
func (p *Policy) RuleFor(name string) (*Rule, bool) {
	if p == nil {
		return nil, false
	}
	if _, err := digest.Parse(name); err == nil {
		return nil, false
	}
	if full, err := pattern.NormalizeRef(name); err == nil {
		name = full
	}
	for i := range p.Rules {
		for _, pat := range p.Rules[i].Images {
			if pat.Match(name) {
				return &p.Rules[i], true
			}
		}
	}
	return nil, false
}

// ruleKey is what a verdict under r, a rule of pol, depends on: the policy
// file and the rule's line (which its reasons name), its keys and its
// keyless trust, as a digest. A policy file read again unchanged gives its
// rules the same keys, so that the verdicts remembered under them stay.
func ruleKey(pol *Policy, r *Rule) string {
	if r.key != "" {
		return r.key
	}
	return fingerprint(pol.Path, r)
}

// fingerprint is ruleKey, worked out.
func fingerprint(path string, r *Rule) string {
	h := sha256.New()
	field := func(s string) { fmt.Fprintf(h, "%d:%s", len(s), s) }
	field(path)
	field(strconv.Itoa(r.Line))
	for _, k := range r.Keys {
		field("key")
		field(k.Path)
		field(string(k.PEM))
		if k.PEM == nil && k.Public != nil {
			if der, err := x509.MarshalPKIXPublicKey(k.Public); err == nil {
				field(string(der))
			}
		}
	}
	if kl := r.Keyless; kl != nil {
		field("keyless")
		field(kl.TrustedRoot)
		field(string(kl.TrustedRootJSON))
		for _, id := range kl.Identities {
			field(id.Issuer)
			field(id.IssuerRegExp)
			field(id.Subject)
			field(id.SubjectRegExp)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Reload loads the policy at path again (LoadWith). When the new file is bad
// it returns old, unchanged, with the error, so that the caller keeps the
// last good policy.
func Reload(old *Policy, path string, o Options) (*Policy, error) {
	p, err := LoadWith(path, o)
	if err != nil {
		return old, err
	}
	return p, nil
}

// LineError is one mistake in a policy file.
type LineError = lineerr.Error

// resolve makes a path written in the policy file at policyPath relative to
// that file's directory, unless it is absolute.
func resolve(policyPath, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(filepath.Dir(policyPath), p)
}

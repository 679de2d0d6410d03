package pattern

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
)

// NormalizeRef returns the full form of an image reference, normalised as
// docker does: nginx is docker.io/library/nginx:latest (a name with neither
// tag nor digest gets :latest), a name with both keeps both. The error says
// why s is not a reference, e.g.
// `invalid reference "Nginx:1": repository name must be lowercase`.
func NormalizeRef(s string) (string, error) {
	r, err := parseRef(s)
	if err != nil {
		return "", fmt.Errorf("invalid reference %q: %w", s, err)
	}
	if r.tag == "" && r.digest == "" {
		return r.full + ":latest", nil
	}
	return r.full, nil
}

// ref is a normalised reference and its parts.
type ref struct {
	full              string // docker.io/library/nginx:1.25
	repo, tag, digest string // tag and digest may be empty
}

// parseRef normalises s with distribution/reference; its error is the cause
// alone, for the caller to name s.
func parseRef(s string) (ref, error) {
	if s == "" {
		return ref{}, errors.New("empty reference")
	}
	if err := checkChars(s); err != nil {
		return ref{}, err
	}
	if bareDigest(s) {
		return ref{}, errors.New("a bare digest is not a reference: name the image, as repository@" + s)
	}
	n, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return ref{}, explain(s, err)
	}
	if upperHost(reference.Domain(n)) {
		return ref{}, reference.ErrNameContainsUppercase
	}
	r := ref{full: n.String(), repo: n.Name()}
	if t, ok := n.(reference.Tagged); ok {
		r.tag = t.Tag()
	}
	if d, ok := n.(reference.Digested); ok {
		r.digest = d.Digest().String()
	}
	return r, nil
}

// bareDigest reports whether s is a digest alone ("sha256:<64 hex>", the
// form of an image ID), which the reference grammar would read as a
// repository named after the algorithm with the hex as its tag.
func bareDigest(s string) bool {
	alg, hex, ok := strings.Cut(s, ":")
	size := map[string]int{"sha256": 64, "sha384": 96, "sha512": 128}[alg]
	return ok && size > 0 && len(hex) == size && strings.Trim(hex, "0123456789abcdef") == ""
}

// upperHost reports whether domain is a first component that the reference
// grammar takes for a registry host only because it has upper case
// ("Team/app"): a host is told by a '.', a ':' port or "localhost", and what
// is left is a repository path, which must be lower case.
func upperHost(domain string) bool {
	return !strings.ContainsAny(domain, ".:") && domain != "localhost" && strings.ToLower(domain) != domain
}

// checkChars refuses whitespace and control characters, which the
// reference grammar would only call "invalid reference format".
func checkChars(s string) error {
	for _, c := range s {
		switch {
		case unicode.IsSpace(c):
			return errors.New("contains whitespace")
		case unicode.IsControl(c):
			return fmt.Errorf("contains the control character %q", c)
		}
	}
	return nil
}

// explain turns distribution/reference's errors into a cause that names the
// part at fault.
func explain(s string, err error) error {
	msg := err.Error()
	switch {
	case errors.Is(err, reference.ErrNameContainsUppercase), strings.Contains(msg, "must be lowercase"):
		return reference.ErrNameContainsUppercase
	case strings.Contains(msg, "64-byte hexadecimal"):
		return errors.New("a 64-digit hexadecimal image ID is not a reference")
	case errors.Is(err, digest.ErrDigestInvalidFormat), errors.Is(err, digest.ErrDigestInvalidLength),
		errors.Is(err, digest.ErrDigestUnsupported):
		_, d, _ := strings.Cut(s, "@")
		return fmt.Errorf("digest %q: %w", d, err)
	case !errors.Is(err, reference.ErrReferenceInvalidFormat):
		return err
	}
	if strings.Contains(s, "://") {
		return errors.New(`a reference has no scheme: drop "https://" or "http://"`)
	}
	rest, d, hasDigest := strings.Cut(s, "@")
	if hasDigest {
		if _, err := digest.Parse(d); err != nil {
			return fmt.Errorf("digest %q: %w", d, err)
		}
	}
	name := rest
	if i := strings.LastIndexByte(rest, ':'); i > strings.LastIndexByte(rest, '/') {
		name = rest[:i]
		if tag := rest[i+1:]; tag == "" {
			return errors.New(`empty tag after ":"`)
		} else if !validTag(tag) {
			return fmt.Errorf("tag %q: %w: up to 128 letters, digits, '_', '.' and '-', not starting with '.' or '-'",
				tag, reference.ErrTagInvalidFormat)
		}
	}
	return fmt.Errorf(`repository name %q is not lower-case letters and digits, in components separated by '/' and joined by '.', '_', '__' or '-'`, name)
}

func validTag(tag string) bool {
	return tag != "" && len(tag) <= 128 && tagChars(tag)
}

// checkTagPrefix accepts the beginning of a tag that can still grow by one
// character (possibly empty).
func checkTagPrefix(t string) error {
	if len(t) > 127 {
		return fmt.Errorf("tag prefix %q: longer than a tag can be", t)
	}
	if !tagChars(t) {
		return fmt.Errorf("tag prefix %q: a tag is letters, digits, '_', '.' and '-', not starting with '.' or '-'", t)
	}
	return nil
}

// tagChars reports whether t holds only tag characters and does not start
// with '.' or '-'.
func tagChars(t string) bool {
	for i, c := range t {
		if !isTagChar(c) || (i == 0 && (c == '.' || c == '-')) {
			return false
		}
	}
	return true
}

func isTagChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

// Package pattern parses and matches holdfast's image patterns: the lines of
// *.pins files and the arguments of `holdfast pin` and `holdfast unpin`.
//
// A pattern is normalised when it is parsed, the way docker normalises a
// reference (nginx is docker.io/library/nginx, index.docker.io is docker.io),
// and it is matched against full normalised image names, as containerd
// records them. Matching is case-sensitive. There are three forms:
//
// Exact: an image reference. The parts it gives must be equal; the parts it
// leaves out match anything. A repository alone (no tag, no digest) matches
// every tag and digest of that repository and nothing else; a tag matches
// that tag, also when the record carries a digest too; a digest matches that
// digest under any tag.
//
//	nginx                  docker.io/library/nginx:1.25                       match
//	                       docker.io/library/nginx@sha256:…                   match
//	                       docker.io/library/nginx-ingress:1                  no: another repository
//	                       docker.io/nginx/nginx:1                            no: another repository
//	nginx:1.25             docker.io/library/nginx:1.25                       match
//	                       docker.io/library/nginx:1.25@sha256:…              match
//	                       docker.io/library/nginx:1.25.3                     no
//	nginx@sha256:…         docker.io/library/nginx@sha256:…                   match
//	                       docker.io/library/nginx:1.25@sha256:…              match
//
// Note that in a pattern nginx means every tag of nginx, while in a pull list
// (and for docker) it means nginx:latest; write nginx:latest to pin only that.
//
// Prefix: a trailing "*". The part before it is normalised as docker would
// normalise a name beginning with it, then the full image name must start
// with the result: nginx* is docker.io/library/nginx*, team/* is
// docker.io/team/*, docker.io/* is all of Docker Hub. The "*" may end inside
// the repository or inside the tag, not inside a digest.
//
//	registry.example.com/team/*   registry.example.com/team/app:1             match
//	                              x/registry.example.com/team/app:1           no: anchored at the start
//	                              registry.example.com/team2/app:1            no
//	nginx*                        docker.io/library/nginx:1.25                match
//	                              docker.io/library/nginx-ingress:1           match
//	                              registry.example.com/nginx:1                no
//	nginx:1.*                     docker.io/library/nginx:1.25                match
//	                              docker.io/library/nginx:2.0                 no
//	registry.example.com/app*     registry.example.com/app:1                  match
//	                              registry.example.com/apps/web:1             match: a prefix has no boundary
//
// A prefix without "/" is a Docker Hub name, so one that looks like a
// registry (a dot, or localhost) is refused as ambiguous:
// registry.example.com* would mean docker.io/library/registry.example.com*;
// write registry.example.com/* for a registry. So is docker.io/library*
// (docker.io/library/library*): write docker.io/library/* for every official
// image.
//
// Keyword: "*keyword*" matches every image whose full name (tag and digest
// included) contains keyword. The keyword is not normalised.
//
//	*nginx*                docker.io/library/nginx:1.25                       match
//	                       registry.example.com/mirror/nginx-ingress:1        match
//	                       docker.io/library/NGINX:1                          no: case-sensitive
//
// Refused: an empty pattern, whitespace, "*" anywhere else ("ngi*nx",
// "*nginx"), "*" or "**" alone (it would pin every image; write a prefix such
// as docker.io/*), and anything docker would refuse as a reference, such as
// an upper-case repository (Nginx).
//
// Names without a "/" never match: every full name has a domain, and the
// CRI's own sha256:<id> records have none.
//
// # Compared with CRI-O's pinned_images
//
// CRI-O's pinned_images list has the same three forms (exact, "prefix*" and
// "*keyword*"), but matches each one against the image name as it was given,
// so nginx and docker.io/library/nginx are different patterns there and the
// first matches nothing CRI-O stores under the second. holdfast normalises
// patterns and matches the full normalised name, so the two are one pattern;
// and an exact pattern without a tag covers the whole repository.
package pattern

import (
	"errors"
	"fmt"
	"strings"

	"github.com/distribution/reference"
)

// Kind is the form of a pattern.
type Kind int

const (
	Exact   Kind = iota + 1 // an image reference: repository, tag, digest
	Prefix                  // ends in "*"
	Keyword                 // "*keyword*"
)

func (k Kind) String() string {
	switch k {
	case Exact:
		return "exact"
	case Prefix:
		return "prefix"
	case Keyword:
		return "keyword"
	}
	return "none"
}

// Pattern is a parsed, normalised pattern. Patterns that mean the same are
// equal (==): nginx and docker.io/library/nginx parse to the same Pattern.
// The zero Pattern matches nothing.
type Pattern struct {
	kind Kind
	text string // Exact: the full reference; Prefix: the normalised prefix; Keyword: the keyword
	// Exact only: the parts of the reference; tag and digest may be empty.
	repo, tag, digest string
}

// ParseAll parses every one of patterns, in order; its error joins one
// error for each that is not a pattern.
func ParseAll(patterns []string) ([]Pattern, error) {
	pats := make([]Pattern, len(patterns))
	var errs []error
	for i, s := range patterns {
		p, err := Parse(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		pats[i] = p
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return pats, nil
}

// Parse parses and normalises a pattern.
func Parse(s string) (Pattern, error) {
	p, err := parse(s)
	if err != nil {
		return Pattern{}, fmt.Errorf("invalid pattern %q: %w", s, err)
	}
	return p, nil
}

func parse(s string) (Pattern, error) {
	if s == "" {
		return Pattern{}, errors.New("empty pattern")
	}
	if err := checkChars(s); err != nil {
		return Pattern{}, err
	}
	stars := strings.Count(s, "*")
	last := len(s) - 1
	switch {
	case stars == 0:
		return parseExact(s)
	case s == "*" || s == "**":
		return Pattern{}, errors.New(`it would match every image; write a prefix such as "docker.io/*" or "registry.example.com/*"`)
	case stars == 1 && s[last] == '*':
		prefix, err := parsePrefix(s[:last])
		if err != nil {
			return Pattern{}, err
		}
		return Pattern{kind: Prefix, text: prefix}, nil
	case stars == 2 && s[0] == '*' && s[last] == '*':
		kw := s[1:last]
		if err := checkKeyword(kw); err != nil {
			return Pattern{}, err
		}
		return Pattern{kind: Keyword, text: kw}, nil
	case stars == 1 && s[0] == '*':
		return Pattern{}, fmt.Errorf(`"*" only at the end (a prefix) or at both ends (a keyword, %q); there is no suffix form`, s+"*")
	}
	return Pattern{}, errors.New(`"*" only at the end (a prefix, "registry.example.com/team/*") or at both ends (a keyword, "*nginx*")`)
}

func parseExact(s string) (Pattern, error) {
	r, err := parseRef(s)
	if err != nil {
		return Pattern{}, err
	}
	return Pattern{kind: Exact, text: r.full, repo: r.repo, tag: r.tag, digest: r.digest}, nil
}

// parsePrefix normalises the part of a prefix pattern before its "*".
func parsePrefix(body string) (string, error) {
	if strings.Contains(body, "@") {
		return "", errors.New(`a prefix cannot end inside a digest; give the whole reference without "*"`)
	}
	name, tagPrefix, inTag := body, "", false
	if i := strings.LastIndexByte(body, ':'); i > strings.LastIndexByte(body, '/') {
		name, tagPrefix, inTag = body[:i], body[i+1:], true
	}
	if !strings.Contains(name, "/") && (strings.Contains(name, ".") || name == "localhost") {
		return "", fmt.Errorf(`%q has no "/", so it is a Docker Hub name (docker.io/library/%s); for a registry write %q`,
			name, name, name+"/*")
	}
	switch body {
	case "library", "docker.io/library", "index.docker.io/library":
		return "", errors.New(`it would mean docker.io/library/library*; write "docker.io/library/*" for every official image`)
	}
	if inTag {
		if err := checkTagPrefix(tagPrefix); err != nil {
			return "", err
		}
		r, err := parseRef(name)
		if err != nil {
			return "", err
		}
		return r.repo + ":" + tagPrefix, nil
	}
	if domain, rest, ok := strings.Cut(body, "/"); ok && rest == "" && (domain == "docker.io" || domain == "index.docker.io") {
		return "docker.io/", nil // all of Docker Hub, not only its official images
	}
	// Normalise the body as the beginning of a name: complete it with a
	// letter no normalisation touches (and that can't make it a hex image
	// ID), then take the letter off again.
	r, err := parseRef(body + "x")
	if err != nil {
		if errors.Is(err, reference.ErrNameContainsUppercase) || errors.Is(err, reference.ErrNameTooLong) {
			return "", err
		}
		return "", fmt.Errorf("%q does not begin a valid image name", body)
	}
	return strings.TrimSuffix(r.repo, "x"), nil
}

// checkKeyword accepts the characters a reference can hold.
func checkKeyword(kw string) error {
	for _, c := range kw {
		if !isRefChar(c) {
			return fmt.Errorf("keyword %q holds %q, which no image reference contains", kw, c)
		}
	}
	return nil
}

func isRefChar(c rune) bool {
	return isTagChar(c) || strings.ContainsRune("/:@+[]", c)
}

// Kind is the pattern's form; 0 for the zero Pattern.
func (p Pattern) Kind() Kind { return p.kind }

// String is the normalised pattern; Parse(p.String()) == p.
func (p Pattern) String() string {
	switch p.kind {
	case Exact:
		return p.text
	case Prefix:
		return p.text + "*"
	case Keyword:
		return "*" + p.text + "*"
	}
	return ""
}

// Match reports whether name, a full normalised image name as containerd
// records it (docker.io/library/nginx:1.25, registry.example.com/app@sha256:…),
// matches. Names without a "/" never match.
func (p Pattern) Match(name string) bool {
	if !strings.Contains(name, "/") {
		return false
	}
	switch p.kind {
	case Exact:
		repo, tag, dgst := split(name)
		return repo == p.repo && (p.tag == "" || tag == p.tag) && (p.digest == "" || dgst == p.digest)
	case Prefix:
		return strings.HasPrefix(name, p.text)
	case Keyword:
		return strings.Contains(name, p.text)
	}
	return false
}

// split cuts a reference into repository, tag and digest (either may be empty).
func split(name string) (repo, tag, dgst string) {
	repo = name
	if i := strings.IndexByte(repo, '@'); i >= 0 {
		repo, dgst = repo[:i], repo[i+1:]
	}
	if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo, tag = repo[:i], repo[i+1:]
	}
	return repo, tag, dgst
}

package signature

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/holdfast-project/holdfast/internal/files"
	"github.com/holdfast-project/holdfast/internal/lineerr"
	"github.com/holdfast-project/holdfast/internal/pattern"
	"github.com/holdfast-project/holdfast/internal/units"
)

// Bounds on the files a policy reads: a larger one is refused before it is
// parsed.
const (
	MaxPolicyBytes      = 1 << 20
	MaxKeyBytes         = 64 << 10
	MaxTrustedRootBytes = 4 << 20
)

// Options tune LoadWith.
type Options struct {
	// InsecurePerms reads a policy file, keys and trusted roots that users
	// other than root and holdfast's own may change (--insecure-perms).
	InsecurePerms bool
}

// Load is LoadWith without options.
func Load(path string) (*Policy, error) {
	return LoadWith(path, Options{})
}

// LoadWith reads and checks the policy file at path, and the key and
// trusted-root files it names. A file that cannot be read (or is too large)
// is one error naming it, as is a policy file that users other than root
// and holdfast's own may change (unless o.InsecurePerms); otherwise every
// mistake found is reported, joined, each a LineError: a key or trusted
// root others may change is one.
func LoadWith(path string, o Options) (*Policy, error) {
	real, err := o.trusted("policy file", path)
	if err != nil {
		return nil, err
	}
	data, err := readLimit(real, MaxPolicyBytes, "a policy file")
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return parse(path, data, o)
}

// trusted judges a file the policy trusts (the policy file, a key, a
// trusted root), what naming it, by the rules of pin lists
// (files.CheckPerms), unless o.InsecurePerms. It returns the path to read:
// path with its symlinks resolved, so that what is read is what was judged.
// A path that does not resolve is returned as it is, for reading it to say
// why.
func (o Options) trusted(what, path string) (string, error) {
	if o.InsecurePerms {
		return path, nil
	}
	real, err := files.CheckResolved(what, path, os.Geteuid())
	if err != nil || real == "" {
		return path, err
	}
	return real, nil
}

// parser collects the mistakes of one policy file.
type parser struct {
	path  string
	opts  Options
	lines int // in the file, at least 1
	errs  []LineError
}

// errorf reports a mistake at node n (nil: the start of the file). A node
// yaml places past the end of the file (an empty value at its very end) is
// put on the last line.
func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	line := 1
	if n != nil && n.Line > 0 {
		line = min(n.Line, p.lines)
	}
	p.errs = append(p.errs, LineError{Path: p.path, Line: line, Err: fmt.Errorf(format, args...)})
}

// parse parses the bytes of the policy file at path.
func parse(path string, data []byte, o Options) (*Policy, error) {
	p := &parser{path: path, opts: o, lines: max(lineCount(data), 1)}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, p.syntax(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.errorf(&extra, "a second YAML document; a policy file holds one")
	} else if !errors.Is(err, io.EOF) {
		return nil, p.syntax(err)
	}
	pol := &Policy{Path: path, Mode: Warn}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	before := len(p.errs)
	p.noAliases(root)
	switch {
	case len(p.errs) > before: // the rest would be checked on aliases left unresolved
	case root.Kind == 0: // empty, or only comments
		p.errorf(nil, "no rules: a policy needs at least one")
	case root.Kind != yaml.MappingNode:
		p.errorf(root, "want a mapping of mode and rules, got %s", describe(root))
	default:
		f := p.fields(root, "the policy", "mode", "rules")
		if n := f["mode"]; n != nil {
			if s, ok := p.str(n, "mode"); ok {
				switch Mode(s) {
				case Enforce, Warn:
					pol.Mode = Mode(s)
				default:
					p.errorf(n, "mode %q: want enforce or warn", s)
				}
			}
		}
		if n := f["rules"]; n == nil {
			p.errorf(root, "no rules: a policy needs at least one")
		} else if items, ok := p.list(n, "rules"); ok {
			if len(items) == 0 {
				p.errorf(n, "rules: empty; a policy needs at least one")
			}
			for _, item := range items {
				if r, ok := p.rule(item); ok {
					pol.Rules = append(pol.Rules, r)
				}
			}
		}
	}
	for i := range pol.Rules {
		pol.Rules[i].key = fingerprint(path, &pol.Rules[i])
	}
	if len(p.errs) > 0 {
		slices.SortStableFunc(p.errs, func(a, b LineError) int { return a.Line - b.Line })
		errs := make([]error, len(p.errs))
		for i, e := range p.errs {
			errs[i] = e
		}
		return nil, errors.Join(errs...)
	}
	return pol, nil
}

// syntaxLine reads the line out of a YAML syntax error.
var syntaxLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parserProblems are the errors of yaml's parser (not its scanner): for these
// it gives the line counted from 0, and no line at all for the first.
var parserProblems = []string{
	"did not find expected <stream-start>",
	"did not find expected <document start>",
	"did not find expected node content",
	"did not find expected '-' indicator",
	"did not find expected key",
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"found undefined tag handle",
	"found duplicate %YAML directive",
	"found incompatible YAML document",
	"found duplicate %TAG directive",
}

// syntax turns a YAML syntax error into a LineError, correcting the
// line of a parser error; one found at the end of the file is put on its last
// line. An error yaml gives no line for (bad UTF-8, an unknown anchor, a
// scanner error on the first line) names the file alone.
func (p *parser) syntax(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := syntaxLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	if slices.Contains(parserProblems, msg) {
		line++
	}
	if line <= 0 {
		return fmt.Errorf("%s: %s", p.path, msg)
	}
	line = min(line, p.lines)
	return LineError{Path: p.path, Line: line, Err: errors.New(msg)}
}

// lineCount is the number of lines in data as YAML counts them: a line ends
// at "\n", "\r\n", "\r", U+0085, U+2028 or U+2029, and text after the last
// break is a line too.
func lineCount(data []byte) int {
	n, open := 0, false
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == '\r' && i+1 < len(data) && data[i+1] == '\n':
			n, open, size = n+1, false, 2
		case r == '\n' || r == '\r' || r == '\u0085' || r == '\u2028' || r == '\u2029':
			n, open = n+1, false
		default:
			open = true
		}
		i += size
	}
	if open {
		n++
	}
	return n
}

// rule parses one item of rules.
func (p *parser) rule(n *yaml.Node) (Rule, bool) {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "rule: want a mapping of images and keys or keyless, got %s", describe(n))
		return Rule{}, false
	}
	before := len(p.errs)
	r := Rule{Line: n.Line}
	f := p.fields(n, "a rule", "images", "keys", "keyless")
	if in := f["images"]; in == nil {
		p.errorf(n, "rule has no images: give the patterns of the images it covers")
	} else if items, ok := p.list(in, "images"); ok {
		if len(items) == 0 {
			p.errorf(in, "images: empty; give the patterns of the images the rule covers")
		}
		for _, item := range items {
			s, ok := p.str(item, "images")
			if !ok {
				continue
			}
			pat, err := parsePattern(s)
			if err != nil {
				p.errorf(item, "images: %v", err)
				continue
			}
			r.Images = append(r.Images, pat)
		}
	}
	kn, kl := f["keys"], f["keyless"]
	if kn == nil && kl == nil {
		p.errorf(n, "rule has neither keys nor keyless: give the keys that may sign its images, or a keyless trustedRoot and identities")
	}
	if kn != nil {
		if items, ok := p.list(kn, "keys"); ok {
			if len(items) == 0 {
				p.errorf(kn, "keys: empty; give at least one public key file, or leave keys out")
			}
			for _, item := range items {
				if s, ok := p.str(item, "keys"); ok {
					if k, ok := p.key(item, s); ok {
						r.Keys = append(r.Keys, k)
					}
				}
			}
		}
	}
	if kl != nil {
		r.Keyless = p.keyless(kl)
	}
	return r, len(p.errs) == before
}

// parsePattern is pattern.Parse, but "*" alone is every image: the keyword
// pattern "/", which every full image name holds.
func parsePattern(s string) (pattern.Pattern, error) {
	if s == "*" {
		return pattern.Parse("*/*")
	}
	return pattern.Parse(s)
}

// key loads the key file a rule names, written s at n.
func (p *parser) key(n *yaml.Node, s string) (Key, bool) {
	if s == "" {
		p.errorf(n, "keys: empty path")
		return Key{}, false
	}
	path := resolve(p.path, s)
	real, err := p.opts.trusted("key", path)
	if err != nil {
		p.errorf(n, "%v", err)
		return Key{}, false
	}
	data, err := readLimit(real, MaxKeyBytes, "a key file")
	if err != nil {
		p.errorf(n, "key %s: %v", path, err)
		return Key{}, false
	}
	pub, block, err := parsePublicKey(data)
	if err != nil {
		p.errorf(n, "key %s: %v", path, err)
		return Key{}, false
	}
	return Key{Path: path, Public: pub, PEM: block}, true
}

// keyless parses a rule's keyless mapping.
func (p *parser) keyless(n *yaml.Node) *Keyless {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "keyless: want a mapping of trustedRoot and identities, got %s", describe(n))
		return nil
	}
	k := &Keyless{}
	f := p.fields(n, "keyless", "trustedRoot", "identities")
	if tn := f["trustedRoot"]; tn == nil {
		p.errorf(n, "keyless has no trustedRoot: give the sigstore trusted root file")
	} else if s, ok := p.str(tn, "trustedRoot"); ok {
		if s == "" {
			p.errorf(tn, "trustedRoot: empty path")
		} else {
			k.TrustedRoot = resolve(p.path, s)
			if real, err := p.opts.trusted("trustedRoot", k.TrustedRoot); err != nil {
				p.errorf(tn, "%v", err)
			} else if data, err := readTrustedRoot(real); err != nil {
				p.errorf(tn, "trustedRoot %s: %v", k.TrustedRoot, err)
			} else {
				k.TrustedRootJSON = data
			}
		}
	}
	if in := f["identities"]; in == nil {
		p.errorf(n, "keyless has no identities: give the issuer and subject of each identity that may sign")
	} else if items, ok := p.list(in, "identities"); ok {
		if len(items) == 0 {
			p.errorf(in, "identities: empty; give the issuer and subject of each identity that may sign")
		}
		for _, item := range items {
			if id, ok := p.identity(item); ok {
				k.Identities = append(k.Identities, id)
			}
		}
	}
	return k
}

// identity parses one item of identities.
func (p *parser) identity(n *yaml.Node) (Identity, bool) {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "identity: want a mapping of issuer and subject, got %s", describe(n))
		return Identity{}, false
	}
	before := len(p.errs)
	f := p.fields(n, "an identity", "issuer", "issuerRegExp", "subject", "subjectRegExp")
	var id Identity
	for _, field := range []struct {
		name string
		dst  *string
		re   bool
	}{
		{"issuer", &id.Issuer, false},
		{"issuerRegExp", &id.IssuerRegExp, true},
		{"subject", &id.Subject, false},
		{"subjectRegExp", &id.SubjectRegExp, true},
	} {
		v := f[field.name]
		if v == nil {
			continue
		}
		s, ok := p.str(v, field.name)
		if !ok {
			continue
		}
		if s == "" {
			p.errorf(v, "%s: empty", field.name)
			continue
		}
		if field.re {
			if _, err := regexp.Compile(s); err != nil {
				p.errorf(v, "%s %q: %v", field.name, s, err)
				continue
			}
		}
		*field.dst = s
	}
	for _, pair := range [][2]string{{"issuer", "issuerRegExp"}, {"subject", "subjectRegExp"}} {
		exact, re := f[pair[0]], f[pair[1]]
		switch {
		case exact == nil && re == nil:
			p.errorf(n, "identity has no %s or %s", pair[0], pair[1])
		case exact != nil && re != nil:
			p.errorf(re, "identity has both %s and %s: give one", pair[0], pair[1])
		}
	}
	return id, len(p.errs) == before
}

// fields returns the values of mapping n by key, reporting keys that are not
// among known and keys given twice; what names the mapping in errors.
func (p *parser) fields(n *yaml.Node, what string, known ...string) map[string]*yaml.Node {
	out := map[string]*yaml.Node{}
	keyLine := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := k.Value
		if !slices.Contains(known, name) {
			hint := ""
			for _, c := range known {
				if strings.EqualFold(c, name) {
					hint = fmt.Sprintf("; did you mean %s?", c)
				}
			}
			if hint == "" {
				hint = fmt.Sprintf(" (want %s)", strings.Join(known, ", "))
			}
			p.errorf(k, "unknown key %q in %s%s", name, what, hint)
			continue
		}
		if line, dup := keyLine[name]; dup {
			p.errorf(k, "%s given twice in %s (first at line %d)", name, what, line)
			continue
		}
		keyLine[name] = k.Line
		out[name] = v
	}
	return out
}

// list returns the items of a sequence; what names it in errors.
func (p *parser) list(n *yaml.Node, what string) ([]*yaml.Node, bool) {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "%s: want a list, got %s", what, describe(n))
		return nil, false
	}
	return n.Content, true
}

// str returns the value of a string scalar; what names it in errors.
func (p *parser) str(n *yaml.Node, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		p.errorf(n, "%s: want a string, got %s", what, describe(n))
		return "", false
	}
	return n.Value, true
}

// noAliases reports every alias (*name) under n. A policy has none: an alias
// can repeat a part of the file many times over without making it larger.
func (p *parser) noAliases(n *yaml.Node) {
	if n.Kind == yaml.AliasNode {
		p.errorf(n, "alias *%s: a policy file has no aliases; write the value out", n.Value)
		return
	}
	for _, c := range n.Content {
		p.noAliases(c)
	}
}

// describe names the kind of a node for an error.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "nothing"
		case "!!str":
			return fmt.Sprintf("the string %q", n.Value)
		case "!!int", "!!float":
			return "the number " + n.Value
		case "!!bool":
			return "the boolean " + n.Value
		}
		return fmt.Sprintf("%s %q", n.ShortTag(), n.Value)
	}
	return "an alias"
}

// readLimit reads a regular file of at most limit bytes (files.ReadFile);
// what names such a file in the error for a larger one. Opening never blocks
// (a named pipe is refused, not waited on). The error is the cause alone,
// for the caller to name the file.
func readLimit(path string, limit int64, what string) ([]byte, error) {
	data, err := files.ReadFile(path, limit)
	if errors.Is(err, files.ErrTooLarge) {
		return nil, fmt.Errorf("larger than %s, more than %s may have", units.Whole(uint64(limit)), what)
	}
	if err != nil {
		return nil, lineerr.Cause(err)
	}
	return data, nil
}

package pattern

import (
	"errors"
	"strings"
	"testing"

	"github.com/distribution/reference"
)

const (
	dA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	dB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want string // String() of the parsed pattern
		kind Kind
	}{
		// exact
		{"nginx", "docker.io/library/nginx", Exact},
		{"docker.io/library/nginx", "docker.io/library/nginx", Exact},
		{"index.docker.io/library/nginx", "docker.io/library/nginx", Exact},
		{"docker.io/nginx", "docker.io/library/nginx", Exact},
		{"nginx:1.25", "docker.io/library/nginx:1.25", Exact},
		{"nginx:latest", "docker.io/library/nginx:latest", Exact},
		{"nginx@" + dA, "docker.io/library/nginx@" + dA, Exact},
		{"nginx:1.25@" + dA, "docker.io/library/nginx:1.25@" + dA, Exact},
		{"bitnami/redis", "docker.io/bitnami/redis", Exact},
		{"registry.example.com/team/app:1", "registry.example.com/team/app:1", Exact},
		{"localhost:5000/app", "localhost:5000/app", Exact},
		{"localhost/app", "localhost/app", Exact},
		{"[::1]:5000/app:v1", "[::1]:5000/app:v1", Exact},
		{"nginx:V1_RC", "docker.io/library/nginx:V1_RC", Exact}, // tags may hold upper case
		// prefix
		{"nginx*", "docker.io/library/nginx*", Prefix},
		{"ngi*", "docker.io/library/ngi*", Prefix},
		{"docker.io/library/nginx*", "docker.io/library/nginx*", Prefix},
		{"docker.io/nginx*", "docker.io/library/nginx*", Prefix},
		{"nginx-*", "docker.io/library/nginx-*", Prefix},
		{"nginx:*", "docker.io/library/nginx:*", Prefix},
		{"nginx:1.*", "docker.io/library/nginx:1.*", Prefix},
		{"docker.io/library/nginx:1.*", "docker.io/library/nginx:1.*", Prefix},
		{"registry.example.com/team/*", "registry.example.com/team/*", Prefix},
		{"registry.example.com/te*", "registry.example.com/te*", Prefix},
		{"registry.example.com/*", "registry.example.com/*", Prefix},
		{"localhost:5000/*", "localhost:5000/*", Prefix},
		{"localhost:5000/app:v*", "localhost:5000/app:v*", Prefix},
		{"team/*", "docker.io/team/*", Prefix},
		{"team/ap*", "docker.io/team/ap*", Prefix},
		{"library/*", "docker.io/library/*", Prefix},
		{"docker.io/*", "docker.io/*", Prefix},
		{"index.docker.io/*", "docker.io/*", Prefix},
		{"docker.io/library/*", "docker.io/library/*", Prefix},
		{"index.docker.io/library/*", "docker.io/library/*", Prefix},
		// keyword
		{"*nginx*", "*nginx*", Keyword},
		{"*/team/*", "*/team/*", Keyword},
		{"*:1.25*", "*:1.25*", Keyword},
		{"*RC*", "*RC*", Keyword},
		{"*x*", "*x*", Keyword},
	} {
		p, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if p.String() != tc.want || p.Kind() != tc.kind {
			t.Errorf("Parse(%q) = %q (%v), want %q (%v)", tc.in, p.String(), p.Kind(), tc.want, tc.kind)
		}
		q, err := Parse(p.String())
		if err != nil || q != p {
			t.Errorf("Parse(%q) = %#v, %v; want %#v", p.String(), q, err, p)
		}
	}
}

func TestParseSamePattern(t *testing.T) {
	t.Parallel()
	for _, group := range [][]string{
		{"nginx", "docker.io/library/nginx", "index.docker.io/library/nginx", "docker.io/nginx", "library/nginx"},
		{"nginx:1", "docker.io/library/nginx:1"},
		{"nginx*", "docker.io/library/nginx*", "library/nginx*", "docker.io/nginx*"},
		{"docker.io/*", "index.docker.io/*"},
	} {
		first, err := Parse(group[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range group[1:] {
			if p, err := Parse(s); err != nil || p != first {
				t.Errorf("Parse(%q) = %v, %v; want the same as %q (%v)", s, p, err, group[0], first)
			}
		}
	}
	a, _ := Parse("nginx")
	b, _ := Parse("nginx:latest")
	if a == b {
		t.Errorf("nginx and nginx:latest are different patterns")
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
	}{
		{"", "empty pattern"},
		{" nginx", "whitespace"},
		{"nginx ", "whitespace"},
		{"ng inx", "whitespace"},
		{"nginx\t", "whitespace"},
		{"nginx\x00", "control character"},
		{"*", "every image"},
		{"**", "every image"},
		{"***", `"*" only`},
		{"ngi*nx", `"*" only`},
		{"registry.example.com/*/app", `"*" only`},
		{"*nginx", "no suffix form"},
		{"nginx**", `"*" only`},
		{"*ngi*nx*", `"*" only`},
		{"Nginx", "repository name must be lowercase"},
		{"Nginx:1", "repository name must be lowercase"},
		{"docker.io/library/Nginx", "repository name must be lowercase"},
		{"registry.example.com/Team/app", "repository name must be lowercase"},
		{"Nginx*", "repository name must be lowercase"},
		{"registry.example.com/Team/*", "repository name must be lowercase"},
		{"nginx:", "tag"},
		{"nginx:-1", "tag"},
		{"nginx:" + strings.Repeat("a", 129), "tag"},
		{"nginx@sha256:abc", "digest"},
		{"nginx@md5:" + strings.Repeat("a", 32), "digest"},
		{"nginx@" + dA + "*", "inside a digest"},
		{"nginx@sha256:ab*", "inside a digest"},
		{"nginx:-*", "tag prefix"},
		{"nginx:a/b*", "does not begin"},
		{"https://registry.example.com/app", "scheme"},
		{"nginx//x", "repository name"},
		{"nginx___x", "repository name"},
		{"ngin$x", "repository name"},
		{"-nginx", "repository name"},
		{"nginx___*", "does not begin"},
		{"team//*", "does not begin"},
		{"/*", "does not begin"},
		{strings.Repeat("a", 64), "hexadecimal image ID"},
		{"registry.example.com*", "for a registry write"},
		{"registry.example.com:5000*", "for a registry write"},
		{"localhost:5000*", "for a registry write"},
		{"localhost*", "for a registry write"},
		{"docker.io/library*", "every official image"},
		{"library*", "every official image"},
		{"*ngi nx*", "whitespace"},
		{"*ngi$nx*", "no image reference contains"},
		{"*ngi%nx*", "no image reference contains"},
	} {
		p, err := Parse(tc.in)
		if err == nil {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tc.in, p, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q): %v; want it to contain %q", tc.in, err, tc.want)
		}
		if !strings.HasPrefix(err.Error(), "invalid pattern ") {
			t.Errorf("Parse(%q): %v; want it to name the pattern", tc.in, err)
		}
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern string
		yes     []string
		no      []string
	}{
		{
			pattern: "nginx",
			yes: []string{
				"docker.io/library/nginx",
				"docker.io/library/nginx:latest",
				"docker.io/library/nginx:1.25",
				"docker.io/library/nginx@" + dA,
				"docker.io/library/nginx:1.25@" + dA,
			},
			no: []string{
				"docker.io/library/nginx-ingress:1", // repository boundary
				"docker.io/library/nginx2:1",
				"docker.io/library/nginx/sub:1",
				"docker.io/nginx/nginx:1",
				"docker.io/library/NGINX:1", // case
				"docker.io/library/Nginx:1",
				"registry.example.com/library/nginx:1",
				"registry.example.com/docker.io/library/nginx:1",
				"x/docker.io/library/nginx:1",
				"nginx:1.25", // not a full name
				"nginx",
				"docker.io/library/ngin:1",
				"sha256:" + dA[7:],
				"",
			},
		},
		{
			pattern: "docker.io/library/nginx",
			yes:     []string{"docker.io/library/nginx:1.25", "docker.io/library/nginx@" + dB},
			no:      []string{"docker.io/library/nginx-ingress:1", "docker.io/library/nginx-ingress"},
		},
		{
			pattern: "nginx:1.25",
			yes:     []string{"docker.io/library/nginx:1.25", "docker.io/library/nginx:1.25@" + dA},
			no: []string{
				"docker.io/library/nginx:1.25.3",
				"docker.io/library/nginx:1.2",
				"docker.io/library/nginx:latest",
				"docker.io/library/nginx",
				"docker.io/library/nginx@" + dA,
				"docker.io/library/nginx-ingress:1.25",
				"docker.io/library/nginx:1.25-alpine",
			},
		},
		{
			pattern: "nginx@" + dA,
			yes:     []string{"docker.io/library/nginx@" + dA, "docker.io/library/nginx:1.25@" + dA},
			no: []string{
				"docker.io/library/nginx@" + dB,
				"docker.io/library/nginx:1.25",
				"docker.io/library/nginx",
				"docker.io/library/nginx-ingress@" + dA,
			},
		},
		{
			pattern: "nginx:1.25@" + dA,
			yes:     []string{"docker.io/library/nginx:1.25@" + dA},
			no:      []string{"docker.io/library/nginx@" + dA, "docker.io/library/nginx:1.25", "docker.io/library/nginx:1.25@" + dB},
		},
		{
			pattern: "localhost:5000/app",
			yes:     []string{"localhost:5000/app:1", "localhost:5000/app@" + dA, "localhost:5000/app"},
			no:      []string{"localhost:5001/app:1", "localhost/app:1", "localhost:5000/app2:1", "localhost:5000/app/x:1"},
		},
		{
			pattern: "example.com/foo*",
			yes:     []string{"example.com/foo:1", "example.com/foobar:1", "example.com/foo/bar:1", "example.com/foo@" + dA},
			no: []string{
				"x/example.com/foo:1", // anchored
				"x.example.com/foo:1",
				"example.com/fo:1",
				"example.com/Foo:1",
				"example.com:5000/foo:1",
				"docker.io/library/example.com/foo:1",
			},
		},
		{
			pattern: "registry.example.com/team/*",
			yes:     []string{"registry.example.com/team/app:1", "registry.example.com/team/a/b@" + dA},
			no: []string{
				"registry.example.com/team2/app:1",
				"registry.example.com/team:1",
				"registry.example.com.evil/team/app:1",
				"other.example.com/registry.example.com/team/app:1",
				"REGISTRY.example.com/team/app:1",
			},
		},
		{
			pattern: "nginx*",
			yes:     []string{"docker.io/library/nginx:1", "docker.io/library/nginx-ingress:1", "docker.io/library/nginx@" + dA},
			no:      []string{"docker.io/nginx/nginx:1", "registry.example.com/nginx:1", "docker.io/library/ngin:1", "quay.io/library/nginx:1"},
		},
		{
			pattern: "nginx:1.*",
			yes:     []string{"docker.io/library/nginx:1.25", "docker.io/library/nginx:1.", "docker.io/library/nginx:1.25@" + dA},
			no:      []string{"docker.io/library/nginx:1", "docker.io/library/nginx:2.1", "docker.io/library/nginx:10.1", "docker.io/library/nginx@" + dA, "docker.io/library/nginx-x:1.2"},
		},
		{
			pattern: "nginx:*",
			yes:     []string{"docker.io/library/nginx:1", "docker.io/library/nginx:latest"},
			no:      []string{"docker.io/library/nginx@" + dA, "docker.io/library/nginx", "docker.io/library/nginx-x:1"},
		},
		{
			pattern: "docker.io/*",
			yes:     []string{"docker.io/library/nginx:1", "docker.io/bitnami/redis:7"},
			no:      []string{"quay.io/library/nginx:1", "docker.io.example.com/x:1", "registry.example.com/docker.io/x:1"},
		},
		{
			pattern: "team/*",
			yes:     []string{"docker.io/team/app:1"},
			no:      []string{"docker.io/library/team:1", "registry.example.com/team/app:1"},
		},
		{
			pattern: "*nginx*",
			yes: []string{
				"docker.io/library/nginx:1",
				"docker.io/library/nginx-ingress:1",
				"registry.example.com/mirror/nginx:1",
				"x/example.com/nginx",
				"registry.example.com/app:nginx-1",
			},
			no: []string{"docker.io/library/NGINX:1", "docker.io/library/ngin:x", "nginx:1", "nginx"},
		},
		{
			pattern: "*:1.25*",
			yes:     []string{"docker.io/library/nginx:1.25", "registry.example.com/a:1.25.3"},
			no:      []string{"docker.io/library/nginx:1.2", "localhost:1/a:1"},
		},
		{
			pattern: "*" + dA[7:20] + "*",
			yes:     []string{"docker.io/library/nginx@" + dA},
			no:      []string{"sha256:" + dA[7:]}, // the CRI's own records are not names
		},
	} {
		p, err := Parse(tc.pattern)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.pattern, err)
		}
		for _, name := range tc.yes {
			if !p.Match(name) {
				t.Errorf("%q (%v) does not match %q; want a match", tc.pattern, p, name)
			}
		}
		for _, name := range tc.no {
			if p.Match(name) {
				t.Errorf("%q (%v) matches %q; want no match", tc.pattern, p, name)
			}
		}
	}
}

func TestZeroPattern(t *testing.T) {
	t.Parallel()
	var p Pattern
	if p.Match("docker.io/library/nginx:1") || p.String() != "" || p.Kind() != 0 {
		t.Errorf("zero Pattern: Match true or String %q or Kind %v", p.String(), p.Kind())
	}
}

func TestNormalizeRef(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"nginx":                             "docker.io/library/nginx:latest",
		"nginx:1.25":                        "docker.io/library/nginx:1.25",
		"nginx@" + dA:                       "docker.io/library/nginx@" + dA,
		"nginx:1.25@" + dA:                  "docker.io/library/nginx:1.25@" + dA,
		"index.docker.io/bitnami/redis":     "docker.io/bitnami/redis:latest",
		"registry.example.com:5000/team/ap": "registry.example.com:5000/team/ap:latest",
	} {
		if got, err := NormalizeRef(in); err != nil || got != want {
			t.Errorf("NormalizeRef(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	_, err := NormalizeRef("Nginx:1")
	if err == nil || err.Error() != `invalid reference "Nginx:1": repository name must be lowercase` {
		t.Errorf("NormalizeRef(Nginx:1): %v", err)
	}
	if !errors.Is(err, reference.ErrNameContainsUppercase) {
		t.Errorf("NormalizeRef(Nginx:1): %v does not wrap reference.ErrNameContainsUppercase", err)
	}
	for _, in := range []string{"", "nginx*", "nginx redis", "nginx:", "nginx@sha256:12", "a//b"} {
		if got, err := NormalizeRef(in); err == nil {
			t.Errorf("NormalizeRef(%q) = %q, want an error", in, got)
		} else if !strings.HasPrefix(err.Error(), "invalid reference ") {
			t.Errorf("NormalizeRef(%q): %v; want it to name the reference", in, err)
		}
	}
}

// TestParseAll: every pattern is parsed, and the error names each bad one.
func TestParseAll(t *testing.T) {
	t.Parallel()
	pats, err := ParseAll([]string{"nginx", "registry.example.com/team/*"})
	if err != nil || len(pats) != 2 || pats[0].String() != "docker.io/library/nginx" || pats[1].Kind() != Prefix {
		t.Errorf("ParseAll: %v, %v", pats, err)
	}
	pats, err = ParseAll([]string{"ngi*nx", "nginx", "Nginx"})
	if pats != nil || err == nil || !strings.Contains(err.Error(), `"ngi*nx"`) || !strings.Contains(err.Error(), `"Nginx"`) {
		t.Errorf("ParseAll of two bad patterns: %v, %v", pats, err)
	}
}

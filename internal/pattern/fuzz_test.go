package pattern

import (
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics, that a parsed pattern round-trips
// through String, and that an exact pattern matches its own normalised form.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"nginx", "nginx:1.25", "nginx@" + dA, "nginx:1.25@" + dA, "docker.io/library/nginx",
		"nginx*", "nginx:1.*", "nginx:*", "docker.io/*", "index.docker.io/*", "team/*",
		"registry.example.com/team/*", "localhost:5000/*", "[::1]:5000/app:v*", "example.com*",
		"*nginx*", "*", "**", "ngi*nx", "*nginx", "Nginx", "nginx@sha256:ab*", "",
	} {
		f.Add(s)
	}
	names := []string{
		"docker.io/library/nginx:1.25",
		"docker.io/library/nginx@" + dA,
		"registry.example.com/team/app:1",
		"sha256:" + dA[7:],
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err != nil {
			if p != (Pattern{}) {
				t.Fatalf("Parse(%q) failed but returned %#v", s, p)
			}
			return
		}
		for _, n := range append(names, s) {
			p.Match(n)
		}
		q, err := Parse(p.String())
		if err != nil {
			t.Fatalf("Parse(%q) = %q, but Parse(%q): %v", s, p.String(), p.String(), err)
		}
		if q != p {
			t.Fatalf("Parse(%q) = %#v, Parse(%q) = %#v", s, p, p.String(), q)
		}
		if p.Kind() == Exact && !p.Match(p.String()) {
			t.Fatalf("exact pattern %q does not match its own name", p.String())
		}
		if p.Kind() == Prefix && !p.Match(strings.TrimSuffix(p.String(), "*")+"x") && strings.Contains(p.String(), "/") {
			t.Fatalf("prefix pattern %q does not match a name it begins", p.String())
		}
	})
}

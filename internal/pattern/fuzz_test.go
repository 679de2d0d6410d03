package pattern

import (
	"strconv"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

// FuzzParse checks that Parse never panics, that a parsed pattern round-trips
// through String, and that an exact pattern matches its own normalised form.
func FuzzParse(f *testing.F) {
	seeds := map[string][]any{}
	for i, s := range []string{
		"nginx", "nginx:1.25", "nginx@" + dA, "nginx:1.25@" + dA, "docker.io/library/nginx",
		"nginx*", "nginx:1.*", "nginx:*", "docker.io/*", "index.docker.io/*", "team/*",
		"registry.example.com/team/*", "localhost:5000/*", "[::1]:5000/app:v*", "example.com*",
		"*nginx*", "*", "**", "ngi*nx", "*nginx", "Nginx", "nginx@sha256:ab*", "",
	} {
		seeds[strconv.Itoa(i)] = []any{s}
	}
	testenv.Seeds(f, seeds)
	names := []string{
		"docker.io/library/nginx:1.25",
		"docker.io/library/nginx@" + dA,
		"registry.example.com/team/app:1",
		"sha256:" + dA[7:],
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Fatalf("Parse(%q): error %q does not name the input", s, err)
			}
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

// FuzzMatchNormalised checks that matching survives normalisation: a name
// written the short way (nginx:1.25) is matched, once normalised as
// containerd records it, by the exact pattern written the same way, by every
// prefix pattern cut from it once its registry is known, and by a keyword
// pattern exactly when the full name contains the keyword. (A prefix that ends
// before the last "/" of the name is normalised on its own: docker.io/libr*
// is docker.io/library/libr*, as docker normalises docker.io/libre.)
func FuzzMatchNormalised(f *testing.F) {
	seeds := map[string][]any{}
	for i, s := range []string{
		"nginx", "nginx:1.25", "library/nginx:1.25", "docker.io/library/nginx:1.25", "index.docker.io/nginx",
		"registry.example.com/team/app:1", "localhost:5000/app:v1", "[::1]:5000/app:v2", "nginx@" + dA,
		"nginx:1.25@" + dA, "team/app", "ghcr.io/owner/repo/sub:tag",
	} {
		seeds[strconv.Itoa(i)+"-3"] = []any{s, 3}
		seeds[strconv.Itoa(i)+"-half"] = []any{s, len(s) / 2}
	}
	testenv.Seeds(f, seeds)
	f.Fuzz(func(t *testing.T, name string, cut int) {
		full, err := NormalizeRef(name)
		if err != nil {
			if !strings.Contains(err.Error(), "invalid reference") {
				t.Fatalf("NormalizeRef(%q): error %q does not name the input", name, err)
			}
			return
		}
		if again, err := NormalizeRef(full); err != nil || again != full {
			t.Fatalf("NormalizeRef(%q) = %q, then %q, %v", name, full, again, err)
		}
		if p, err := Parse(name); err == nil {
			if p.Kind() != Exact {
				t.Fatalf("reference %q parsed as a %s pattern", name, p.Kind())
			}
			if !p.Match(full) {
				t.Fatalf("pattern %q (%q) does not match %q, the normalised name", name, p, full)
			}
		}
		if cut < 0 {
			cut = -cut
		}
		if cut < 0 { // math.MinInt
			return
		}
		cut %= len(name) + 1
		if prefix := name[:cut]; strings.Count(prefix, "/") == strings.Count(name, "/") {
			if p, err := Parse(prefix + "*"); err == nil && !strings.ContainsAny(prefix, "@*") {
				if p.Kind() == Prefix && !p.Match(full) {
					t.Fatalf("prefix pattern %q (%q) does not match %q, the normalised %q", prefix+"*", p, full, name)
				}
			}
		}
		if kw := name[cut:]; kw != "" {
			if p, err := Parse("*" + kw + "*"); err == nil && p.Kind() == Keyword {
				if p.Match(full) != strings.Contains(full, kw) {
					t.Fatalf("keyword %q on %q: Match %v", kw, full, p.Match(full))
				}
			}
		}
	})
}

package signature

import (
	"crypto/elliptic"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

// FuzzParse: a policy file never panics Load's parser; every error names the
// file, and a line error a line the file has; a parsed policy has rules,
// each with images and keys or keyless.
func FuzzParse(f *testing.F) {
	testenv.Seeds(f, map[string][]any{
		"keys":    {[]byte("mode: enforce\nrules:\n  - images: [\"registry.example.com/*\"]\n    keys: [a.pub]\n")},
		"keyless": {[]byte("rules:\n  - images: [\"*\"]\n    keyless:\n      trustedRoot: root.json\n      identities:\n        - {issuer: i, subjectRegExp: \"^s$\"}\n")},
		"alias":   {[]byte("rules:\n  - &r {images: [nginx], keys: [a.pub]}\n  - *r\n")},
		"unknown": {[]byte("mode: warn\nrules: []\nextra: {a: [1, 2]}\n")},
		"broken":  {[]byte("rules:\n  - images: [nginx\n")},
		"docs":    {[]byte("rules: x\n---\n---\n")},
		"empty":   {[]byte("")},
	})
	dir := f.TempDir()
	writeKey(f, filepath.Join(dir, "a.pub"), &ecdsaKey(f, elliptic.P256()).PublicKey)
	write(f, filepath.Join(dir, "root.json"), trustedRoot)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 16<<10 {
			return
		}
		path := filepath.Join(dir, "policy.yaml")
		p, err := parse(path, data, Options{})
		if err != nil {
			if p != nil {
				t.Fatal("parse returned a policy with its error")
			}
			lines := max(lineCount(data), 1)
			errs := []error{err}
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = j.Unwrap()
			}
			for _, e := range errs {
				if !strings.HasPrefix(e.Error(), path+":") {
					t.Fatalf("error %q does not name the file", e)
				}
				var le LineError
				if errors.As(e, &le) && (le.Line < 1 || le.Line > lines) {
					t.Fatalf("error %q: line %d of a file of %d lines", e, le.Line, lines)
				}
			}
			return
		}
		if len(p.Rules) == 0 || (p.Mode != Enforce && p.Mode != Warn) {
			t.Fatalf("parsed policy with mode %q and %d rules", p.Mode, len(p.Rules))
		}
		for _, r := range p.Rules {
			if len(r.Images) == 0 || (len(r.Keys) == 0 && r.Keyless == nil) {
				t.Fatalf("parsed rule %+v", r)
			}
		}
	})
}

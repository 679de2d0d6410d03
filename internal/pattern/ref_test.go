package pattern

import (
	"errors"
	"strings"
	"testing"

	"github.com/distribution/reference"
)

// TestNormalizeRefNotAReference: a bare digest (the CRI's image ID form) and
// a first component that is only taken for a registry host because of its
// upper case are not references; a host with a dot, a port or localhost
// still is one, whatever its case.
func TestNormalizeRefNotAReference(t *testing.T) {
	t.Parallel()
	for in, cause := range map[string]string{
		dA:                                   "a bare digest is not a reference",
		"sha512:" + strings.Repeat("ab", 64): "a bare digest is not a reference",
		"UPPER/case:v1":                      "repository name must be lowercase",
		"Team/app":                           "repository name must be lowercase",
		"UPPER/case@" + dA:                   "repository name must be lowercase",
	} {
		got, err := NormalizeRef(in)
		if err == nil || !strings.Contains(err.Error(), cause) || !strings.HasPrefix(err.Error(), "invalid reference ") {
			t.Errorf("NormalizeRef(%q) = %q, %v; want an error naming it and %q", in, got, err, cause)
		}
		if strings.HasPrefix(in, "UPPER") || strings.HasPrefix(in, "Team") {
			if !errors.Is(err, reference.ErrNameContainsUppercase) {
				t.Errorf("NormalizeRef(%q): %v does not wrap reference.ErrNameContainsUppercase", in, err)
			}
		}
	}
	for in, want := range map[string]string{
		"Registry.Example.com/team/app:1": "Registry.Example.com/team/app:1",
		"MyHost:5000/team/app:1":          "MyHost:5000/team/app:1",
		"localhost/team/app:1":            "localhost/team/app:1",
		"sha256:abc":                      "docker.io/library/sha256:abc",
		"team/sha256:" + dA[7:]:           "docker.io/team/sha256:" + dA[7:],
	} {
		if got, err := NormalizeRef(in); err != nil || got != want {
			t.Errorf("NormalizeRef(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

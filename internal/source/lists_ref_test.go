package source

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestPullListNotAReference: a pull list's bare digest or upper-case first
// component is an error at its line, like any reference that does not parse,
// and the lines around it are still read.
func TestPullListNotAReference(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "list.txt")
	write(t, path, []byte("registry.example.com/team/a:1\n"+digestA+"\nUPPER/case:v1\nregistry.example.com/team/b:1\n"))
	l, err := ReadPullList(path)
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, e := range l.Entries {
		refs = append(refs, e.Ref)
	}
	if want := []string{"registry.example.com/team/a:1", "registry.example.com/team/b:1"}; !reflect.DeepEqual(refs, want) {
		t.Errorf("entries %v, want %v", refs, want)
	}
	if len(l.Errors) != 2 {
		t.Fatalf("errors %v, want lines 2 and 3", l.Errors)
	}
	for i, want := range []string{path + ":2: invalid reference \"" + digestA + "\": a bare digest is not a reference",
		path + ":3: invalid reference \"UPPER/case:v1\": repository name must be lowercase"} {
		if got := l.Errors[i].Error(); !strings.HasPrefix(got, want) {
			t.Errorf("error %d:\n got %s\nwant %s...", i, got, want)
		}
	}
}

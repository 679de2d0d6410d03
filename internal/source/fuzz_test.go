package source

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/pattern"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

var listSeeds = map[string][]any{
	"comments":  {[]byte("\ufeff# images for the edge nodes\nnginx\n  busybox:1.36   # the shell  \n\n   \t\n    # indented\n")},
	"crlf":      {[]byte("nginx:1.25\r\nredis:7@" + digestA + "\r\n# c\r\n\r\nquay.io/x/y:1\r\n")},
	"bad-lines": {[]byte("Nginx:1\nnginx redis\nnginx#not-a-comment\nquay.io/x/y:\n")},
	"no-eol":    {[]byte("registry.example.com/team/app@" + digestA)},
	"dups":      {[]byte("nginx\ndocker.io/library/nginx:latest\nindex.docker.io/library/nginx\n")},
	"patterns":  {[]byte("nginx*\n*redis*\nregistry.example.com/team/*\nlocalhost:5000/app:v*\n[::1]:5000/app:1\n**\nngi*nx\n")},
	"empty":     {[]byte("")},
}

func writeList(t *testing.T, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkLineErrors: every error names the file and a line that exists.
func checkLineErrors(t *testing.T, path string, b []byte, errs []LineError) {
	t.Helper()
	lines := strings.Count(string(b), "\n") + 1
	for _, e := range errs {
		if e.Path != path || e.Line < 1 || e.Line > lines {
			t.Fatalf("error %v: path %q line %d (file %q, %d lines)", e, e.Path, e.Line, path, lines)
		}
		if !strings.HasPrefix(e.Error(), path+":"+strconv.Itoa(e.Line)+": ") {
			t.Fatalf("error %q does not begin with %s:%d", e.Error(), path, e.Line)
		}
	}
}

// FuzzPullList: a pull list never panics; every error names the file and an
// existing line; entries are in line order, normalised (normalising again
// changes nothing) and unique; the same file with CRLF line ends reads the
// same; and a list written back from the entries (raw or normalised) reads
// back to the same references.
func FuzzPullList(f *testing.F) {
	testenv.Seeds(f, listSeeds)
	f.Fuzz(func(t *testing.T, b []byte) {
		path := "/images/list.txt"
		l := parsePullList(path, b)
		checkLineErrors(t, path, b, l.Errors)
		seen := map[string]bool{}
		prev := 0
		var raws, refs []string
		for _, e := range l.Entries {
			if e.Line <= prev || seen[e.Ref] {
				t.Fatalf("entries out of order or repeated: %+v", l.Entries)
			}
			prev = e.Line
			seen[e.Ref] = true
			if n, err := pattern.NormalizeRef(e.Ref); err != nil || n != e.Ref {
				t.Fatalf("entry %q: normalised again %q, %v", e.Ref, n, err)
			}
			raws = append(raws, e.Raw)
			refs = append(refs, e.Ref)
		}
		if crlf := parsePullList(path, []byte(strings.ReplaceAll(string(b), "\n", "\r\n"))); !reflect.DeepEqual(pullRefs(crlf), refs) {
			t.Fatalf("with CRLF: %v; with LF: %v", pullRefs(crlf), refs)
		}
		for _, lines := range [][]string{raws, refs} {
			back := parsePullList(path, []byte(strings.Join(lines, "\n")))
			if len(back.Errors) != 0 || !reflect.DeepEqual(pullRefs(back), refs) {
				t.Fatalf("written back as %q: %v, errors %v; want %v", lines, pullRefs(back), back.Errors, refs)
			}
		}
	})
}

func pullRefs(l PullListFile) []string {
	var out []string
	for _, e := range l.Entries {
		out = append(out, e.Ref)
	}
	return out
}

func pinPatterns(l PinListFile) []pattern.Pattern {
	var out []pattern.Pattern
	for _, p := range l.Patterns {
		out = append(out, p.Pattern)
	}
	return out
}

// FuzzPinList: as FuzzPullList, for pin lists: patterns are unique, in line
// order; CRLF reads the same; the normalised patterns written back read back
// to the same patterns.
func FuzzPinList(f *testing.F) {
	testenv.Seeds(f, listSeeds)
	f.Fuzz(func(t *testing.T, b []byte) {
		path := "/images/list.pins"
		l := parsePinList(path, b)
		checkLineErrors(t, path, b, l.Errors)
		seen := map[pattern.Pattern]bool{}
		prev := 0
		var texts []string
		for _, p := range l.Patterns {
			if p.Line <= prev || seen[p.Pattern] {
				t.Fatalf("patterns out of order or repeated: %+v", l.Patterns)
			}
			prev = p.Line
			seen[p.Pattern] = true
			texts = append(texts, p.Pattern.String())
		}
		want := pinPatterns(l)
		if crlf := parsePinList(path, []byte(strings.ReplaceAll(string(b), "\n", "\r\n"))); !reflect.DeepEqual(pinPatterns(crlf), want) {
			t.Fatalf("with CRLF: %v; with LF: %v", pinPatterns(crlf), want)
		}
		back := parsePinList(path, []byte(strings.Join(texts, "\n")))
		if len(back.Errors) != 0 || !reflect.DeepEqual(pinPatterns(back), want) {
			t.Fatalf("written back as %q: %v, errors %v; want %v", texts, pinPatterns(back), back.Errors, want)
		}
	})
}

// TestListBounds: a list over MaxListBytes or MaxListLines is refused whole
// with an error naming the file and the bound; one just inside both reads.
func TestListBounds(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("# "+strings.Repeat("x", 1021)+"\n", MaxListBytes/1024+1)
	many := strings.Repeat("\n", MaxListLines) + "nginx\n" // MaxListLines+2 lines
	fits := strings.Repeat("\n", MaxListLines-2) + "nginx\n"
	// Exactly MaxListLines lines, with and without the final newline (which
	// ends the last line: it starts none), and one more.
	exact := strings.Repeat("nginx\n", MaxListLines)
	for _, tc := range []struct {
		name, data, want string
	}{
		{"bytes", big, "larger than 4 MiB"},
		{"lines", many, "more than a list may have (100000)"},
		{"fits", fits, ""},
		{"exactly the bound, newline at the end", exact, ""},
		{"exactly the bound, no newline at the end", strings.TrimSuffix(exact, "\n"), ""},
		{"one over the bound", exact + "nginx\n", "100001 lines, more than a list may have (100000)"},
		{"one over the bound, no newline at the end", exact + "nginx", "100001 lines, more than a list may have (100000)"},
	} {
		for _, read := range []func(string) error{
			func(p string) error { _, err := ReadPullList(p); return err },
			func(p string) error { _, err := ReadPinList(p); return err },
		} {
			path := writeList(t, tc.name+".txt", []byte(tc.data))
			err := read(path)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				continue
			}
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%s: error %v, want one naming %s and %q", tc.name, err, path, tc.want)
			}
		}
	}
}

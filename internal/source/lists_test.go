package source

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/distribution/reference"

	"github.com/holdfast-project/holdfast/internal/pattern"
)

const digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func TestReadPullList(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "list.txt")
	write(t, path, []byte("\ufeff# images for the edge nodes\n"+ // 1
		"nginx\n"+ // 2
		"Nginx:1\n"+ // 3
		"  busybox:1.36   # the shell  \n"+ // 4
		"\n"+ // 5
		"   \t\n"+ // 6
		"registry.example.com/team/app@"+digestA+"\n"+ // 7
		"docker.io/library/nginx:latest\n"+ // 8: the same as line 2
		"redis:7@"+digestA+"\r\n"+ // 9
		"nginx#not-a-comment\n"+ // 10
		"nginx redis\n"+ // 11
		"    # indented comment\n"+ // 12
		"index.docker.io/bitnami/redis:7\n"+ // 13
		"busybox:1.36\n"+ // 14: again
		"quay.io/x/y:")) // 15, no newline
	l, err := ReadPullList(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []PullEntry{
		{Line: 2, Ref: "docker.io/library/nginx:latest", Raw: "nginx"},
		{Line: 4, Ref: "docker.io/library/busybox:1.36", Raw: "busybox:1.36"},
		{Line: 7, Ref: "registry.example.com/team/app@" + digestA, Raw: "registry.example.com/team/app@" + digestA},
		{Line: 9, Ref: "docker.io/library/redis:7@" + digestA, Raw: "redis:7@" + digestA},
		{Line: 13, Ref: "docker.io/bitnami/redis:7", Raw: "index.docker.io/bitnami/redis:7"},
	}
	if !reflect.DeepEqual(l.Entries, want) {
		t.Errorf("entries:\n got %+v\nwant %+v", l.Entries, want)
	}
	if l.Path != path {
		t.Errorf("path %q", l.Path)
	}
	var lines []int
	for _, e := range l.Errors {
		lines = append(lines, e.Line)
		if e.Path != path {
			t.Errorf("error %v: path %q", e, e.Path)
		}
	}
	if !reflect.DeepEqual(lines, []int{3, 10, 11, 15}) {
		t.Fatalf("error lines %v, want [3 10 11 15]: %v", lines, l.Errors)
	}
	if got, want := l.Errors[0].Error(), path+`:3: invalid reference "Nginx:1": repository name must be lowercase`; got != want {
		t.Errorf("error:\n got %s\nwant %s", got, want)
	}
	if !errors.Is(l.Errors[0], reference.ErrNameContainsUppercase) {
		t.Errorf("%v does not unwrap to its cause", l.Errors[0])
	}
	if got := l.Errors[2].Error(); !strings.Contains(got, "one reference per line") {
		t.Errorf("line 11: %s", got)
	}
}

// TestListKinds: a pull list, the peer list and a pin list are each read as
// their kind; the peer list has a pull list's grammar.
func TestListKinds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pulls, peers, pins := filepath.Join(dir, "list.txt"), filepath.Join(dir, "required.txt"), filepath.Join(dir, "keep.pins")
	for _, p := range []string{pulls, peers, pins} {
		write(t, p, []byte("# header\nnginx\nNot A Ref\n"))
	}
	pl, err := ReadPullList(pulls)
	if err != nil || pl.Kind != Pulls {
		t.Errorf("pull list: kind %q (%v), want %q", pl.Kind, err, Pulls)
	}
	peer, err := ReadPeerList(peers)
	if err != nil || peer.Kind != Peers {
		t.Errorf("peer list: kind %q (%v), want %q", peer.Kind, err, Peers)
	}
	if !reflect.DeepEqual(peer.Entries, pl.Entries) || len(peer.Errors) != len(pl.Errors) {
		t.Errorf("peer list: %+v, want a pull list's entries and errors %+v", peer, pl)
	}
	if pn, err := ReadPinList(pins); err != nil || pn.Kind != Pins {
		t.Errorf("pin list: kind %q (%v), want %q", pn.Kind, err, Pins)
	}
}

func TestReadPinList(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keep.pins")
	write(t, path, []byte("# pins\n"+
		"nginx\n"+ // 2
		"registry.example.com/team/*   # the team's images\n"+ // 3
		"ngi*nx\n"+ // 4
		"docker.io/library/nginx\n"+ // 5: the same pattern as line 2
		"*ingress*\n"+ // 6
		"\n"+
		"Nginx:1.*\n"+ // 8
		"nginx:1.25\n")) // 9
	l, err := ReadPinList(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range l.Patterns {
		got = append(got, strings.Join([]string{strconv.Itoa(p.Line), p.Raw, p.Pattern.String()}, " "))
	}
	want := []string{
		"2 nginx docker.io/library/nginx",
		"3 registry.example.com/team/* registry.example.com/team/*",
		"6 *ingress* *ingress*",
		"9 nginx:1.25 docker.io/library/nginx:1.25",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("patterns:\n got %q\nwant %q", got, want)
	}
	if len(l.Errors) != 2 || l.Errors[0].Line != 4 || l.Errors[1].Line != 8 {
		t.Fatalf("errors: %v", l.Errors)
	}
	if s := l.Errors[0].Error(); !strings.HasPrefix(s, path+`:4: invalid pattern "ngi*nx": `) {
		t.Errorf("error: %s", s)
	}
	if p, _ := pattern.Parse("nginx"); l.Patterns[0].Pattern != p {
		t.Errorf("pattern %v", l.Patterns[0].Pattern)
	}
}

func TestReadListUnreadable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "missing.txt")
	if _, err := ReadPullList(path); err == nil || !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "reading "+path+": ") {
		t.Errorf("ReadPullList: %v", err)
	}
	if _, err := ReadPinList(path); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadPinList: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "empty.pins")
	write(t, empty, nil)
	if l, err := ReadPinList(empty); err != nil || len(l.Patterns) != 0 || len(l.Errors) != 0 {
		t.Errorf("empty list: %+v, %v", l, err)
	}
}

func TestListContent(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                     "",
		"# comment":            "",
		"   # comment":         "",
		"#nginx":               "",
		"nginx":                "nginx",
		"  nginx  ":            "nginx",
		"nginx # comment":      "nginx",
		"nginx\t# comment":     "nginx",
		"nginx#tag":            "nginx#tag",
		"nginx # a # b":        "nginx",
		"nginx\r":              "nginx",
		"a b # c":              "a b",
		"*x* # keyword":        "*x*",
		"nginx:1.25#x # real":  "nginx:1.25#x",
		"\t \t":                "",
		"registry/app # ## x ": "registry/app",
	} {
		if got := ListContent(in); got != want {
			t.Errorf("ListContent(%q) = %q, want %q", in, got, want)
		}
	}
}

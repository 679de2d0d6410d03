package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/cli"
	"github.com/holdfast-project/holdfast/internal/datadir"
	"github.com/holdfast-project/holdfast/internal/source"
)

// holdfast runs the command tree in-process and returns stdout, stderr and
// the exit code.
func holdfast(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := cli.New("test", "")
	var out, errOut bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.ExecuteContext(context.Background())
	if err != nil {
		fmt.Fprintf(&errOut, "holdfast: %v\n", err)
	}
	return out.String(), errOut.String(), cli.ExitCode(err)
}

func pinsFile(dataDir string) string { return filepath.Join(dataDir, "pins", "local.pins") }

func readPins(t *testing.T, dataDir string) string {
	t.Helper()
	b, err := os.ReadFile(pinsFile(dataDir))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// patternLines is the content of the pin list without comments and blanks.
func patternLines(t *testing.T, dataDir string) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(readPins(t, dataDir), "\n") {
		if c := source.ListContent(l); c != "" {
			out = append(out, c)
		}
	}
	return out
}

func TestPinUnpin(t *testing.T) {
	t.Parallel()
	dd := filepath.Join(t.TempDir(), "data") // does not exist yet
	file := pinsFile(dd)

	out, errOut, code := holdfast(t, "pin", "--data-dir", dd, "nginx", "registry.example.com/team/*")
	if code != 0 {
		t.Fatalf("pin: exit %d: %s", code, errOut)
	}
	want := fmt.Sprintf("pinned pattern \"nginx\" in %s\npinned pattern \"registry.example.com/team/*\" in %s\n", file, file)
	if out != want {
		t.Errorf("pin output:\n%s\nwant:\n%s", out, want)
	}
	if got := strings.Join(patternLines(t, dd), ","); got != "nginx,registry.example.com/team/*" {
		t.Errorf("patterns %q", got)
	}

	// Again, in another spelling of the same pattern: a no-op that says so.
	before := readPins(t, dd)
	out, errOut, code = holdfast(t, "pin", "--data-dir", dd, "docker.io/library/nginx", "nginx")
	if code != 0 {
		t.Fatalf("pin again: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, `pattern "docker.io/library/nginx" is already pinned in `+file+` (line 3: "nginx")`) ||
		!strings.Contains(out, `pattern "nginx" is already pinned in `+file+" (line 3)") {
		t.Errorf("pin again output:\n%s", out)
	}
	if after := readPins(t, dd); after != before {
		t.Errorf("pin of a pinned pattern changed the file:\n%s\nto\n%s", before, after)
	}

	// Listing.
	out, _, code = holdfast(t, "pin", "--data-dir", dd)
	if code != 0 || out != "nginx\nregistry.example.com/team/*\n" {
		t.Errorf("pin (list): exit %d, %q", code, out)
	}

	// unpin by another spelling removes the line.
	out, errOut, code = holdfast(t, "unpin", "--data-dir", dd, "index.docker.io/library/nginx")
	if code != 0 {
		t.Fatalf("unpin: exit %d: %s", code, errOut)
	}
	if out != fmt.Sprintf("unpinned pattern \"nginx\" in %s\n", file) {
		t.Errorf("unpin output %q", out)
	}
	if got := strings.Join(patternLines(t, dd), ","); got != "registry.example.com/team/*" {
		t.Errorf("patterns after unpin %q", got)
	}

	// unpin of a pattern not listed: exit 1, naming the file; the others still go.
	out, errOut, code = holdfast(t, "unpin", "--data-dir", dd, "nginx", "registry.example.com/team/*")
	if code != 1 {
		t.Errorf("unpin missing: exit %d, want 1", code)
	}
	if !strings.Contains(errOut, `pattern "nginx" is not in `+file) {
		t.Errorf("unpin missing: stderr %q", errOut)
	}
	if !strings.Contains(out, `unpinned pattern "registry.example.com/team/*"`) {
		t.Errorf("unpin missing: stdout %q", out)
	}
	if got := patternLines(t, dd); len(got) != 0 {
		t.Errorf("patterns left: %q", got)
	}
}

func TestPinBadPattern(t *testing.T) {
	t.Parallel()
	dd := t.TempDir()
	for _, args := range [][]string{
		{"pin", "nginx", "ngi*nx"},
		{"pin", "Nginx"},
		{"pin", ""},
		{"pin", "*"},
		{"unpin", "nginx", "*nginx"},
		{"unpin"},
	} {
		_, errOut, code := holdfast(t, append(args[:1:1], append([]string{"--data-dir", dd}, args[1:]...)...)...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2; %s", args, code, errOut)
		}
		if len(args) > 1 && !strings.Contains(errOut, "invalid pattern") {
			t.Errorf("%q: stderr %q", args, errOut)
		}
	}
	if _, err := os.Stat(pinsFile(dd)); !os.IsNotExist(err) {
		t.Errorf("a bad pattern wrote the file: %v", err)
	}
}

func TestPinKeepsComments(t *testing.T) {
	t.Parallel()
	dd := t.TempDir()
	file := pinsFile(dd)
	original := "# our pins\n" +
		"\n" +
		"nginx   # web\n" +
		"# redis goes next\n" +
		"redis:7\n" +
		"not a pattern\n" +
		"*ingress*\n"
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(original), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := holdfast(t, "pin", "--data-dir", dd, "busybox:1.36"); code != 0 {
		t.Fatalf("pin: exit %d: %s", code, errOut)
	}
	if got, want := readPins(t, dd), original+"busybox:1.36\n"; got != want {
		t.Errorf("after pin:\n%s\nwant:\n%s", got, want)
	}
	if _, errOut, code := holdfast(t, "unpin", "--data-dir", dd, "docker.io/library/redis:7", "nginx"); code != 0 {
		t.Fatalf("unpin: exit %d: %s", code, errOut)
	}
	want := "# our pins\n" +
		"\n" +
		"# redis goes next\n" +
		"not a pattern\n" +
		"*ingress*\n" +
		"busybox:1.36\n"
	if got := readPins(t, dd); got != want {
		t.Errorf("after unpin:\n%s\nwant:\n%s", got, want)
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640 kept", fi.Mode().Perm())
	}
	// Listing reports the bad line and exits 1.
	out, errOut, code := holdfast(t, "pin", "--data-dir", dd)
	if code != 1 || out != "*ingress*\nbusybox:1.36\n" || !strings.Contains(errOut, file+`:4: invalid pattern "not a pattern"`) {
		t.Errorf("list: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// No temp files left behind.
	ents, _ := os.ReadDir(filepath.Dir(file))
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

func TestPinListMissingFile(t *testing.T) {
	t.Parallel()
	dd := t.TempDir()
	out, errOut, code := holdfast(t, "pin", "--data-dir", dd)
	if code != 0 || out != "" || !strings.Contains(errOut, "no local pins") {
		t.Errorf("pin (list) without local.pins: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// unpin of anything: exit 1, and no file is created.
	if _, errOut, code := holdfast(t, "unpin", "--data-dir", dd, "nginx"); code != 1 || !strings.Contains(errOut, "is not in "+pinsFile(dd)) {
		t.Errorf("unpin without local.pins: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(pinsFile(dd)); !os.IsNotExist(err) {
		t.Errorf("unpin created the file: %v", err)
	}
}

func TestPinWhileDataDirLocked(t *testing.T) {
	t.Parallel()
	dd := t.TempDir()
	lock, err := datadir.Acquire(dd, "run")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	if _, errOut, code := holdfast(t, "pin", "--data-dir", dd, "nginx"); code != 0 {
		t.Fatalf("pin while the data dir is owned: exit %d: %s", code, errOut)
	}
	if _, errOut, code := holdfast(t, "unpin", "--data-dir", dd, "nginx"); code != 0 {
		t.Fatalf("unpin while the data dir is owned: exit %d: %s", code, errOut)
	}
}

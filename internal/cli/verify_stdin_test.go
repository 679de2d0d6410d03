package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-project/holdfast/internal/cli"
	"github.com/holdfast-project/holdfast/internal/fixture"
)

// holdfastIn runs holdfast with args, its standard input read from in.
func holdfastIn(t *testing.T, in []byte, args ...string) (string, string, int) {
	t.Helper()
	cmd := cli.New("test", "")
	var out, errOut bytes.Buffer
	cmd.SetArgs(args)
	// A pipe: no Seek, no ReadAt.
	cmd.SetIn(struct{ io.Reader }{bytes.NewReader(in)})
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.ExecuteContext(context.Background())
	if err != nil {
		fmt.Fprintf(&errOut, "holdfast: %v\n", err)
	}
	return out.String(), errOut.String(), cli.ExitCode(err)
}

// TestVerifyStdin: verify - reads the archive from standard input and gives
// the verdicts verify of the file gives, with "-" as their path; a cut
// stream is an error naming standard input.
func TestVerifyStdin(t *testing.T) {
	s := newSignedSet(t)
	pol := s.policy(t, "enforce", verifyRepo+"*")
	for _, path := range []string{
		s.writeOCI(t, filepath.Join(s.dir, "images.tar"), fixture.OCIOptions{}),
		s.writeHaul(t, filepath.Join(s.dir, "haul.tar.zst")),
	} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			fromFile, _, fileCode := verifyJSON(t, "--policy", pol, path)
			out, errOut, code := holdfastIn(t, data, "verify", "-o", "json", "--policy", pol, "-")
			if code != fileCode || code != 1 {
				t.Errorf("verify - exited %d, verify of the file %d; want 1 for both (stderr %q)", code, fileCode, errOut)
			}
			var doc struct {
				Images []cli.VerifyImage `json:"images"`
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("verify - -o json printed %q (stderr %q): %v", out, errOut, err)
			}
			if len(doc.Images) != len(fromFile) || len(fromFile) != 3 {
				t.Fatalf("verify - lists %d images, verify of the file %d; want 3 (stderr %q)", len(doc.Images), len(fromFile), errOut)
			}
			for _, v := range doc.Images {
				f := fromFile[v.Name]
				if v.Path != "-" {
					t.Errorf("%s: path %q, want -", v.Name, v.Path)
				}
				v.Path, f.Path = "", ""
				if v != f {
					t.Errorf("verify -: %+v; verify of the file: %+v", v, f)
				}
			}
			_, errOut, code = holdfastIn(t, data[:len(data)/2], "verify", "--policy", pol, "-")
			if code != 1 || !strings.Contains(errOut, "error: verify standard input: ") {
				t.Errorf("a cut stream: exit %d, stderr %q; want 1 and an error naming standard input", code, errOut)
			}
		})
	}
}

// TestStdinOnce: standard input is read once: naming it twice, as - or
// /dev/stdin, is bad usage.
func TestStdinOnce(t *testing.T) {
	for _, args := range [][]string{{"verify", "--policy", "p.yaml", "-", "/dev/stdin"}, {"import", "-", "-"}} {
		_, errOut, code := holdfastIn(t, nil, args...)
		if code != 2 || !strings.Contains(errOut, "standard input (-) is read once") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and why", args, code, errOut)
		}
	}
}

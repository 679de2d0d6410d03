package cli_test

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestExportUsage: what export cannot do is refused before it connects,
// with exit status 2 and a message that says what to give.
func TestExportUsage(t *testing.T) {
	t.Parallel()
	dd := filepath.Join(t.TempDir(), "data")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"export", "nginx"}, "-o FILE"},
		{[]string{"export", "-o", "out.tar.zst"}, "PATTERN, --source PATH or --all"},
		{[]string{"export", "--all", "-o", "out.tar"}, "must end in .tar.zst or .tzst"},
		{[]string{"export", "--all", "--compression", "none", "-o", "out.tar.zst"}, "must end in .tar"},
		{[]string{"export", "--all", "--compression", "xz", "-o", "out.tar.xz"}, "want zstd or none"},
		{[]string{"export", "ngi*nx", "-o", "out.tar.zst"}, "ngi*nx"},
	} {
		_, errOut, code := holdfast(t, append(c.args, "--data-dir", dd)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("holdfast %s: exit %d, %q; want 2 and %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
}

package cli_test

import (
	"strings"
	"testing"
)

// A --write-path or HOLDFAST_WRITE_PATH other than auto, direct or stream is
// bad usage, refused before anything runs.
func TestWritePathBadValue(t *testing.T) {
	dd := t.TempDir()
	_, errOut, code := holdfast(t, "pin", "--data-dir", dd, "--write-path", "fast", "nginx")
	if code != 2 || !strings.Contains(errOut, `write path "fast"`) {
		t.Errorf("flag: exit %d, want 2; %s", code, errOut)
	}
	t.Setenv("HOLDFAST_WRITE_PATH", "quick")
	_, errOut, code = holdfast(t, "pin", "--data-dir", dd, "nginx")
	if code != 2 || !strings.Contains(errOut, "HOLDFAST_WRITE_PATH") || !strings.Contains(errOut, `write path "quick"`) {
		t.Errorf("env: exit %d, want 2; %s", code, errOut)
	}
	t.Setenv("HOLDFAST_WRITE_PATH", "auto")
	if _, errOut, code = holdfast(t, "pin", "--data-dir", dd, "nginx"); code != 0 {
		t.Errorf("auto: exit %d, want 0; %s", code, errOut)
	}
}

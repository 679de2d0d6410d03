package files

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSHA256: a file's sum as sha256sum gives it; a missing file and a directory are errors naming the path.
func TestSHA256(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("holdfast\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// printf 'holdfast\n' | sha256sum
	if got, err := SHA256(p); err != nil || got != "620c073d967242de2cfa27e4c63d634a65081b95a2e33696f6ccd7cfbf8a54ab" {
		t.Fatalf("SHA256 = %q, %v", got, err)
	}
	for _, bad := range []string{filepath.Join(dir, "missing"), dir} {
		if _, err := SHA256(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("SHA256(%s): %v, want an error naming it", bad, err)
		}
	}
	if _, err := SHA256(dir); !errors.Is(err, ErrNotRegular) {
		t.Errorf("a directory: %v, want ErrNotRegular", err)
	}
}

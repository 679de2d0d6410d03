package containerd

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseWritePath(t *testing.T) {
	for _, s := range []string{"auto", "direct", "stream"} {
		if p, err := ParseWritePath(s); err != nil || string(p) != s {
			t.Errorf("ParseWritePath(%q) = %q, %v", s, p, err)
		}
	}
	for _, s := range []string{"", "Direct", "fast"} {
		if _, err := ParseWritePath(s); err == nil {
			t.Errorf("ParseWritePath(%q) took it", s)
		}
	}
}

// A temp file whose writer holds its lock stays; one nobody locks (a crash
// left it) goes.
func TestSweepTempKeepsLockedFiles(t *testing.T) {
	dir := t.TempDir()
	busy, crashed := filepath.Join(dir, "blob-busy"), filepath.Join(dir, "blob-crashed")
	f, err := os.Create(busy)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(crashed, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := sweepTemp(dir, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(busy); err != nil {
		t.Errorf("the locked file went: %v", err)
	}
	if _, err := os.Stat(crashed); !os.IsNotExist(err) {
		t.Errorf("the unlocked file stayed: %v", err)
	}
}

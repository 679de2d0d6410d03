package source

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestIdentifyNamedPipe: a named pipe given as a path is refused, naming it
// and pointing at -: it has no identity a later import could compare.
func TestIdentifyNamedPipe(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "images.tar")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Identify(fifo)
	if err == nil || !strings.HasPrefix(err.Error(), fifo+" is not a regular file but a named pipe") || !strings.Contains(err.Error(), "give - and connect the pipe to standard input") {
		t.Errorf("Identify of a named pipe: %v; want it named, and - pointed at", err)
	}
}

// TestIsStdin: - and the names of descriptor 0 are standard input; a file
// called stdin is not.
func TestIsStdin(t *testing.T) {
	for path, want := range map[string]bool{"-": true, "/dev/stdin": true, "/dev/fd/0": true, "/proc/self/fd/0": true,
		"stdin": false, "./-": false, "/dev/fd/1": false, "": false} {
		if got := IsStdin(path); got != want {
			t.Errorf("IsStdin(%q) = %v, want %v", path, got, want)
		}
	}
}

package containerd

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A socket path that does not exist, or is not a socket, is said at once as
// what it is, not as a timeout after the dial's deadline.
func TestNewNamesAMissingSocket(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "plain")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		address, want string
		notExist      bool
	}{
		{filepath.Join(dir, "missing.sock"), "no such file or directory", true},
		{"unix://" + filepath.Join(dir, "missing.sock"), "no such file or directory", true},
		{file, "not a socket", false},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		r, err := New(ctx, tc.address, "k8s.io")
		cancel()
		if err == nil {
			r.Close()
			t.Fatalf("New(%s): connected", tc.address)
		}
		msg := err.Error()
		if !strings.Contains(msg, tc.want) || !strings.Contains(msg, strings.TrimPrefix(tc.address, "unix://")) {
			t.Errorf("New(%s): %q, want the socket named and %q", tc.address, msg, tc.want)
		}
		if errors.Is(err, fs.ErrNotExist) != tc.notExist {
			t.Errorf("New(%s): errors.Is(err, fs.ErrNotExist) = %v, want %v", tc.address, !tc.notExist, tc.notExist)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("New(%s): %q is a timeout", tc.address, msg)
		}
	}
}

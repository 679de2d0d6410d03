package notify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// listen opens a notification socket like systemd's at addr and returns it.
func listen(t *testing.T, addr string) *net.UnixConn {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listening on %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// receive reads one datagram.
func receive(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("receiving: %v", err)
	}
	return string(buf[:n])
}

func socketPath(t *testing.T) string {
	// Short: a unix socket path must fit in 108 bytes.
	return filepath.Join(t.TempDir(), "n.sock")
}

func TestSend(t *testing.T) {
	t.Parallel()
	path := socketPath(t)
	conn := listen(t, path)

	ext, err := ExtendState(90 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		states []string
		want   string
	}{
		{[]string{"READY=1"}, "READY=1"},
		{[]string{ext}, "EXTEND_TIMEOUT_USEC=90000000"},
		{[]string{StatusState("importing 3 archives")}, "STATUS=importing 3 archives"},
		{[]string{StatusState("two\nlines\r\nhere")}, "STATUS=two lines here"},
		{[]string{"STOPPING=1"}, "STOPPING=1"},
		{[]string{"READY=1", StatusState("ready")}, "READY=1\nSTATUS=ready"},
	} {
		if err := Send(path, tc.states...); err != nil {
			t.Fatalf("Send %q: %v", tc.states, err)
		}
		if got := receive(t, conn); got != tc.want {
			t.Errorf("Send %q: received %q, want %q", tc.states, got, tc.want)
		}
	}
}

func TestAbstractSocket(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("abstract unix sockets are Linux-only")
	}
	name := fmt.Sprintf("@holdfast-notify-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	conn := listen(t, name)
	if err := Send(name, "READY=1"); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, conn); got != "READY=1" {
		t.Errorf("received %q, want READY=1", got)
	}
	// Abstract: nothing appears in the file system.
	if _, err := os.Stat(strings.TrimPrefix(name, "@")); err == nil {
		t.Error("an abstract socket left a file behind")
	}
}

func TestUnsetIsNoop(t *testing.T) {
	t.Parallel()
	if err := Send(""); err != nil {
		t.Errorf("Send with no socket: %v", err)
	}
	if err := Send("", "READY=1"); err != nil {
		t.Errorf("Send with no socket: %v", err)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	if err := Send("relative/n.sock", "READY=1"); err == nil || !strings.Contains(err.Error(), "unsupported socket address") {
		t.Errorf("relative path: %v", err)
	}
	if err := Send("vsock:2:1234", "READY=1"); err == nil {
		t.Error("vsock address: no error")
	}
	missing := filepath.Join(t.TempDir(), "none.sock")
	if err := Send(missing, "READY=1"); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing socket: %v", err)
	}
	if _, err := ExtendState(-time.Second); err == nil {
		t.Error("negative extension: no error")
	}
}

// The package-level functions read $NOTIFY_SOCKET, so these tests set the
// environment and cannot run in parallel.

func TestFromEnv(t *testing.T) {
	path := socketPath(t)
	conn := listen(t, path)
	t.Setenv(EnvSocket, path)

	for _, tc := range []struct {
		call func() error
		want string
	}{
		{Ready, "READY=1"},
		{func() error { return Extend(1500 * time.Millisecond) }, "EXTEND_TIMEOUT_USEC=1500000"},
		{func() error { return Status("3 of 5 sources applied") }, "STATUS=3 of 5 sources applied"},
		{Stopping, "STOPPING=1"},
	} {
		if err := tc.call(); err != nil {
			t.Fatalf("%s: %v", tc.want, err)
		}
		if got := receive(t, conn); got != tc.want {
			t.Errorf("received %q, want %q", got, tc.want)
		}
	}
	if err := Extend(-time.Second); err == nil {
		t.Error("Extend(-1s): no error")
	}
}

func TestFromEnvUnset(t *testing.T) {
	t.Setenv(EnvSocket, "")
	for name, call := range map[string]func() error{
		"Ready":    Ready,
		"Extend":   func() error { return Extend(time.Second) },
		"Status":   func() error { return Status("x") },
		"Stopping": Stopping,
	} {
		if err := call(); err != nil {
			t.Errorf("%s with NOTIFY_SOCKET unset: %v", name, err)
		}
	}
}

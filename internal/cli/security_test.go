package cli

import (
	"net"
	"testing"

	"github.com/holdfast-project/holdfast/internal/flagenv"
	"github.com/holdfast-project/holdfast/internal/server"
)

// TestListenDefaultLoopback: `holdfast run` serves /metrics, /healthz and
// /readyz on a loopback address unless told otherwise (--listen or
// HOLDFAST_LISTEN), and that address really binds loopback only.
func TestListenDefaultLoopback(t *testing.T) {
	root := New("test", "")
	run, _, err := root.Find([]string{"run"})
	if err != nil {
		t.Fatal(err)
	}
	f := run.Flags().Lookup("listen")
	if f == nil {
		t.Fatal("run has no --listen flag")
	}
	if env, _ := flagenv.Of(f); env != "HOLDFAST_LISTEN" {
		t.Errorf("--listen env var %q, want HOLDFAST_LISTEN", env)
	}
	host, _, err := net.SplitHostPort(f.DefValue)
	if err != nil {
		t.Fatalf("--listen default %q: %v", f.DefValue, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Fatalf("--listen default %q is not a loopback address", f.DefValue)
	}
	// The default host, with a free port, binds a loopback socket only.
	s := server.New(net.JoinHostPort(host, "0"), nil, nil, nil)
	if err := s.Listen(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, _, err := net.SplitHostPort(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(got); ip == nil || !ip.IsLoopback() {
		t.Fatalf("listening on %s, not loopback", s.Addr())
	}
}

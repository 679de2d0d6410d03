package testenv

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSpegelArgs(t *testing.T) {
	s := Spegel{Addr: PeerNet + "2", Peer: PeerNet + "1", ContainerdSock: "/run/c.sock", Namespace: "k8s.io",
		ContentRoot: "/var/lib/c/root", DataDir: "/tmp/spegel"}
	args := s.Args()
	if args[0] != "registry" {
		t.Fatalf("args start with %q, want registry", args[0])
	}
	want := map[string]string{
		"--containerd-sock":         "/run/c.sock",
		"--containerd-namespace":    "k8s.io",
		"--containerd-content-path": "/var/lib/c/root/io.containerd.content.v1.content",
		"--data-dir":                "/tmp/spegel",
		"--registry-addr":           "10.77.0.2:5000",
		"--router-addr":             "10.77.0.2:5001",
		"--metrics-addr":            "10.77.0.2:9090",
		"--bootstrap-kind":          "http",
		"--http-bootstrap-addr":     "10.77.0.2:5002",
		"--http-bootstrap-peer":     "http://10.77.0.1:5002",
	}
	for flag, v := range want {
		i := slices.Index(args, flag)
		if i < 0 || i+1 >= len(args) || args[i+1] != v {
			t.Errorf("%s: args %q, want %s %s", flag, args, flag, v)
		}
	}
}

func TestWriteMirror(t *testing.T) {
	dir := t.TempDir()
	if err := WriteMirror(dir, "bench.example", PeerNet+"2"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "bench.example", "hosts.toml"))
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{`server = "http://127.0.0.1:9"`, `[host."http://10.77.0.2:5000"]`, `capabilities = ["pull", "resolve"]`} {
		if !strings.Contains(got, want) {
			t.Errorf("hosts.toml lacks %s:\n%s", want, got)
		}
	}
}

func TestWriteNetnsWrapper(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in-netns")
	if err := WriteNetnsWrapper(path, "hf-ns", "/usr/bin/holdfast"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("wrapper %s: %v, mode %v: want executable", path, err, fi.Mode())
	}
	b, _ := os.ReadFile(path)
	if want := "exec ip netns exec hf-ns /usr/bin/holdfast \"$@\"\n"; !strings.HasSuffix(string(b), want) {
		t.Errorf("wrapper:\n%s\nwant it to end with %q", b, want)
	}
}

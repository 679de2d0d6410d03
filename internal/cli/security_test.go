package cli

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/holdfast-project/holdfast/internal/runtime"
	"github.com/holdfast-project/holdfast/internal/server"
)

// TestListenDefaultLoopback: `holdfast run` serves /metrics, /healthz and
// /readyz on a loopback address unless told otherwise (--listen or
// HOLDFAST_LISTEN), and that address really binds loopback only.
func TestListenDefaultLoopback(t *testing.T) {
	root := New("test")
	run, _, err := root.Find([]string{"run"})
	if err != nil {
		t.Fatal(err)
	}
	f := run.Flags().Lookup("listen")
	if f == nil {
		t.Fatal("run has no --listen flag")
	}
	if env, _ := flagEnv(f); env != "HOLDFAST_LISTEN" {
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

// TestStatusSymlinkTarget: an archive symlinked into an images dir is shown
// with what it points to: "target" in status -o json (the other fields as
// they were), "path -> target" in the table.
func TestStatusSymlinkTarget(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "store", "app.tar")
	link := filepath.Join(dir, "images", "app.tar")
	plain := filepath.Join(dir, "images", "plain.tar")
	for _, d := range []string{filepath.Dir(real), filepath.Dir(link)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{real, plain} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	target := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("m"), Size: 1}
	srcs := []runtime.SourceState{
		{Lease: "holdfast/app", Source: link, Identity: "i1", Complete: true, Images: []runtime.Want{{Name: "example.com/app:1", Target: target}}},
		{Lease: "holdfast/plain", Source: plain, Identity: "i2", Complete: true, Images: []runtime.Want{{Name: "example.com/plain:1", Target: target}}},
	}
	imgs := []runtime.ImageDetail{
		{Image: runtime.Image{Name: "example.com/app:1", Target: target}},
		{Image: runtime.Image{Name: "example.com/plain:1", Target: target}},
	}
	st := buildStatus(imgs, srcs)
	addTargets(&st)
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Sources []map[string]any `json:"sources"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	for _, s := range out.Sources {
		for _, k := range []string{"path", "lease", "identity", "complete", "images"} {
			if _, ok := s[k]; !ok {
				t.Errorf("source %v lacks %q", s, k)
			}
		}
		switch s["path"] {
		case link:
			if s["target"] != real {
				t.Errorf("symlinked source: target %v, want %s", s["target"], real)
			}
		case plain:
			if _, ok := s["target"]; ok {
				t.Errorf("plain source has a target: %v", s)
			}
		}
	}
	var tb bytes.Buffer
	if err := writeTable(&tb, st); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tb.String(), link+" -> "+real) {
		t.Errorf("table does not show %s -> %s:\n%s", link, real, tb.String())
	}
	if strings.Contains(tb.String(), plain+" ->") {
		t.Errorf("table shows a target for %s:\n%s", plain, tb.String())
	}
}

// Package e2e runs holdfast end to end against real containerd servers that the
// suite starts itself: the embedded containerd 2.x built into the holdfast
// binary, and Debian's containerd 1.6 as the old-version target. Outcomes are
// checked with real clients: containerd's client, the CRI API and crictl.
package e2e

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// holdfastBin is the holdfast binary built once for the whole suite.
var holdfastBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: -short given, skipping the end-to-end suite")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "holdfast-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	holdfastBin = filepath.Join(dir, "holdfast")
	if err := buildHoldfast(holdfastBin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func buildHoldfast(out string) error {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	version := os.Getenv("HOLDFAST_CONTAINERD_VERSION")
	if version == "" {
		v, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/containerd/containerd/v2").Output()
		if err != nil {
			return fmt.Errorf("finding containerd's version: %w", err)
		}
		version = strings.TrimPrefix(strings.TrimSpace(string(v)), "v")
	}
	// As `make build` does: holdfast static, the embedded containerd with
	// containerd's version linked in, side by side.
	builds := []struct {
		cgo, ldflags, pkg string
	}{
		{"0", "-X main.version=e2e", "./cmd/holdfast"},
		{"", "-X github.com/containerd/containerd/v2/version.Version=" + version, "./cmd/holdfast-containerd"},
	}
	for _, b := range builds {
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", b.ldflags, "-o", filepath.Dir(out)+"/", b.pkg)
		cmd.Dir = root
		cmd.Env = os.Environ()
		if b.cgo != "" {
			cmd.Env = append(cmd.Env, "CGO_ENABLED="+b.cgo)
		}
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building %s: %w", b.pkg, err)
		}
	}
	return nil
}

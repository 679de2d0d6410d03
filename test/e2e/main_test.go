// Package e2e runs holdfast end to end against real containerd servers that the
// suite starts itself: the embedded containerd 2.x built into the holdfast
// binary, and Debian's containerd 1.6 as the old-version target. Outcomes are
// checked with real clients: containerd's client, the CRI API and crictl.
package e2e

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// holdfastBin is the holdfast binary built once for the whole suite.
var holdfastBin string

func TestMain(m *testing.M) {
	if out := os.Getenv(maxRSSEnv); out != "" {
		os.Exit(runMeasured(out, os.Args[1:]))
	}
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

// repoRoot is the repository's top directory: go test runs a package's tests
// in the package's directory (file paths in the binary say nothing when it is
// built with -trimpath, as make test builds it).
func repoRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Join(wd, "..", "..")
}

func buildHoldfast(out string) error {
	root := repoRoot()
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

// maxRSSEnv makes the test binary a wrapper that runs the command in its
// arguments, waits for it and writes the command's peak RSS (rusage
// ru_maxrss, KiB) to the file the variable names. A child's ru_maxrss
// includes the peak RSS of the process that started it, up to its exec (Go
// starts children with vfork): measured straight from the test process, it
// would include the test's own. The wrapper starts small.
const maxRSSEnv = "HOLDFAST_E2E_MAXRSS_OUT"

func runMeasured(out string, args []string) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, maxRSSEnv+"=") })
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 125
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return 125
	}
	if err := os.WriteFile(out, []byte(strconv.FormatInt(ru.Maxrss, 10)), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 125
	}
	return code
}

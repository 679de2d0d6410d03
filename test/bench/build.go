package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Tools are the binaries the harness runs.
type Tools struct {
	Holdfast string `json:"holdfast"`
	Ctr      string `json:"ctr"`
}

// containerdModule is the module ctr and the embedded containerd come from.
const containerdModule = "github.com/containerd/containerd/v2"

// BuildTools builds holdfast, holdfast-containerd (linked with containerd's
// version, as `make build` does) and ctr from the containerd module version go.mod requires,
// into dir. It runs the go command of PATH in the module holding the working
// directory.
func BuildTools(ctx context.Context, dir string) (Tools, error) {
	t := Tools{Holdfast: filepath.Join(dir, "holdfast"), Ctr: filepath.Join(dir, "ctr")}
	mod, err := goOutput(ctx, "", "env", "GOMOD")
	if err != nil || mod == "" || mod == os.DevNull {
		return t, fmt.Errorf("building the tools: not inside the holdfast module (go env GOMOD: %q %v)", mod, err)
	}
	root := filepath.Dir(mod)
	version, err := goOutput(ctx, root, "list", "-m", "-f", "{{.Version}}", containerdModule)
	if err != nil {
		return t, fmt.Errorf("building the tools: %w", err)
	}
	version = strings.TrimPrefix(version, "v")
	versionFlag := "-X " + containerdModule + "/version.Version=" + version
	builds := []struct{ out, pkg, ldflags, env string }{
		{t.Holdfast, "./cmd/holdfast", "-s -w -X main.version=bench", "CGO_ENABLED=0"}, // static, as `make build`
		{filepath.Join(dir, "holdfast-containerd"), "./cmd/holdfast-containerd", "-s -w " + versionFlag, ""},
		{t.Ctr, containerdModule + "/cmd/ctr", "-s -w " + versionFlag, ""},
	}
	for _, b := range builds {
		if _, err := goOutputEnv(ctx, root, []string{b.env}, "build", "-buildvcs=false", "-trimpath", "-ldflags", b.ldflags, "-o", b.out, b.pkg); err != nil {
			return t, fmt.Errorf("building %s: %w", b.pkg, err)
		}
	}
	return t, nil
}

func goOutput(ctx context.Context, dir string, args ...string) (string, error) {
	return goOutputEnv(ctx, dir, nil, args...)
}

// goOutputEnv runs the go command with env (NAME=value; empty ones are
// ignored) added to holdfast-bench's environment.
func goOutputEnv(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	for _, e := range env {
		if e != "" {
			if cmd.Env == nil {
				cmd.Env = os.Environ()
			}
			cmd.Env = append(cmd.Env, e)
		}
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

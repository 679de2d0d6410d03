package main

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

// buildReporter builds this command into a temp dir.
func buildReporter(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "holdfast-reporter")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestUsage: --help exits 0; no node is a usage error (2), and so is a bad
// value of an env var.
func TestUsage(t *testing.T) {
	var stderr bytes.Buffer
	if code := run([]string{"--help"}, &stderr); code != 0 || !strings.Contains(stderr.String(), "--node") ||
		!strings.Contains(stderr.String(), "--required") || !strings.Contains(stderr.String(), "--cluster-workloads") {
		t.Fatalf("--help: exit %d\n%s", code, stderr.String())
	}
	t.Setenv("NODE_NAME", "")
	stderr.Reset()
	if code := run(nil, &stderr); code != 2 || !strings.Contains(stderr.String(), "NODE_NAME") {
		t.Fatalf("no node: exit %d\n%s", code, stderr.String())
	}
	t.Setenv("HOLDFAST_REPORT_INTERVAL", "soon")
	if code := run([]string{"--node", "n"}, &stderr); code != 2 {
		t.Fatalf("a bad HOLDFAST_REPORT_INTERVAL: exit %d", code)
	}
	t.Setenv("HOLDFAST_REPORT_INTERVAL", "")
	for _, env := range []string{"HOLDFAST_REQUIRED", "HOLDFAST_CLUSTER_WORKLOADS"} {
		t.Setenv(env, "maybe")
		stderr.Reset()
		if code := run([]string{"--node", "n"}, &stderr); code != 2 || !strings.Contains(stderr.String(), env) {
			t.Fatalf("a bad %s: exit %d\n%s", env, code, stderr.String())
		}
		t.Setenv(env, "")
	}
}

// TestSIGTERM: the reporter, configured from its environment, keeps asking an
// API server that answers 503 (backing off), and exits 0 at SIGTERM.
func TestSIGTERM(t *testing.T) {
	bin := buildReporter(t)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	defer api.Close()
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"ready":true,"pinned":1,"sources":1,"failing":[],"healBackoff":[],"events":[],"next":1}`))
	}))
	defer agent.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "` + api.URL + `"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "NODE_NAME=node-1", "KUBECONFIG="+kubeconfig, "HOLDFAST_AGENT="+agent.URL, "HOLDFAST_REPORT_INTERVAL=50ms",
		"HOLDFAST_CLUSTER_WORKLOADS=false")
	logs := &testenv.Buffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	// Two reports that failed, the second waiting twice as long: the
	// reporter keeps asking, backing off. (Counting requests is no proof:
	// the pod informer's own watch and list come first, at once.)
	const retry = "reporting to the API server; trying again"
	deadline := time.Now().Add(time.Minute)
	for strings.Count(logs.String(), retry) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the reporter did not retry its report twice within a minute\n%s", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) || err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, logs)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit within 30s of SIGTERM\n%s", logs)
	}
	out := logs.String()
	for _, want := range []string{`"interval":"50ms"`, `"node":"node-1"`, `"required":true`, `"clusterWorkloads":false`,
		`"in":"100ms"`, `"in":"200ms"`, `"msg":"stopping"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}

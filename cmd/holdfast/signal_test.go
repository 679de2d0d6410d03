package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSignalEndsBlockedCommand: a command blocked where no context reaches
// (holdfast check reading manifests from a pipe that never ends, or from a
// named pipe nobody opens for writing) is gone soon after SIGTERM or
// SIGINT, with the exit status a shell gives for the signal (128+n). The
// test asserts a generous bound and logs the time it took.
func TestSignalEndsBlockedCommand(t *testing.T) {
	bin := buildHoldfast(t)
	for _, c := range []struct {
		name string
		sig  syscall.Signal
		code int
		fifo bool
	}{
		{"SIGTERM, standard input", syscall.SIGTERM, 143, false},
		{"SIGINT, standard input", syscall.SIGINT, 130, false},
		{"SIGTERM, named pipe", syscall.SIGTERM, 143, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(bin, "check", "--data-dir", t.TempDir())
			if c.fifo {
				fifo := filepath.Join(t.TempDir(), "manifests.yaml")
				if err := syscall.Mkfifo(fifo, 0o600); err != nil {
					t.Fatal(err)
				}
				cmd.Args = append(cmd.Args, "-f", fifo)
			} else {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close() // open until the test ends: the read never ends
				cmd.Stdin = r
				defer r.Close()
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			defer func() {
				if cmd.ProcessState == nil {
					_ = cmd.Process.Kill()
					<-done
				}
			}()
			waitBlocked(t, cmd.Process.Pid)
			start := time.Now()
			if err := cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("holdfast check still runs 5s after %v\n%s", c.sig, stderr.String())
			}
			took := time.Since(start)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != c.code {
				t.Errorf("holdfast check after %v: %v, want exit status %d\n%s", c.sig, err, c.code, stderr.String())
			}
			t.Logf("gone %v after %v", took.Round(time.Millisecond), c.sig)
		})
	}
}

// waitBlocked waits until a thread of pid is blocked reading a pipe or
// opening a named pipe, so that the signal comes once the command is past
// its start and stuck where no context reaches.
func waitBlocked(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "wchan"))
		for _, task := range tasks {
			b, _ := os.ReadFile(task)
			if w := string(b); strings.Contains(w, "pipe_read") || strings.Contains(w, "pipe_wait") || w == "wait_for_partner" {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("holdfast (pid %d) never blocked on its input", pid)
}

// buildHoldfast builds this command into a temp dir.
func buildHoldfast(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: builds holdfast")
	}
	bin := filepath.Join(t.TempDir(), "holdfast")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building holdfast: %v\n%s", err, out)
	}
	return bin
}

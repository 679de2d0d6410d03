package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// regPeerMirror is the peer mirror the registry config tests write; nothing
// listens there, and nothing is pulled.
const regPeerMirror = "http://127.0.0.1:30020"

// asNobody runs a command as user nobody (uid 65534), as another local user
// on the node would.
func asNobody(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %q as nobody: %v\n%s", name, args, err, out)
	}
}

// regRun runs holdfast with a deadline: run does not end by itself unless it
// refuses, so the deadline ends it (code -1).
func regRun(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return runHoldfast(t, exec.CommandContext(ctx, holdfastBin, args...))
}

// TestSecRegistryConfigOthersMayWrite: in a certs.d every local user may
// write (0777), user nobody plants quay.io -> DIR (to make holdfast write
// DIR/hosts.toml) and ghcr.io/hosts.toml.tmp -> FILE (to make it overwrite a
// root-only file). sync and run refuse the registry config (exit 2, naming
// it, what is wrong and the way out); with --insecure-perms the symlinked
// registry dir is refused, named. Either way nothing is written: DIR stays
// empty and FILE keeps its bytes. Without the dir link, --insecure-perms
// writes every hosts.toml, and none through the planted tmp link.
func TestSecRegistryConfigOthersMayWrite(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	base := filepath.Dir(dataDir)
	if err := os.Chmod(base, 0o755); err != nil { // nobody must reach certs.d
		t.Fatal(err)
	}
	certs, dir, file := filepath.Join(base, "certs.d"), filepath.Join(base, "dir"), filepath.Join(base, "secret")
	for _, p := range []string{imagesDir, dir, certs} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(certs, 0o777); err != nil {
		t.Fatal(err)
	}
	secret := []byte("root only: not to be overwritten\n")
	if err := os.WriteFile(file, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	asNobody(t, "ln", "-s", dir, filepath.Join(certs, "quay.io"))
	asNobody(t, "mkdir", filepath.Join(certs, "ghcr.io"))
	asNobody(t, "ln", "-s", file, filepath.Join(certs, "ghcr.io", "hosts.toml.tmp"))

	untouched := func(when string) {
		t.Helper()
		if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
			t.Errorf("%s: %s holds %v (%v); want it empty", when, dir, entries, err)
		}
		if b, err := os.ReadFile(file); err != nil || !bytes.Equal(b, secret) {
			t.Errorf("%s: %s is now %q (%v); want %q", when, file, b, err, secret)
		}
	}
	hosts := func() []string {
		m, err := filepath.Glob(filepath.Join(certs, "*", "hosts.toml"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	common := []string{"--address", d.Address, "--data-dir", dataDir, "--images", imagesDir,
		"--registry-config", certs, "--peer-mirror", regPeerMirror}
	runArgs := []string{"run", "--listen", "127.0.0.1:0"}
	want := "registry config " + certs + " is writable by others (mode 0777); fix the mode or owner, or pass --insecure-perms"
	for _, cmd := range [][]string{{"sync"}, runArgs} {
		res := regRun(t, append(cmd, common...)...)
		if res.Code != 2 || !strings.Contains(res.Stderr, want) {
			t.Errorf("%s in a certs.d others may write: exit %d; want 2 and %q\n%s", cmd[0], res.Code, want, tail(res.Stderr, 10))
		}
		untouched(cmd[0])
		if h := hosts(); len(h) != 0 {
			t.Errorf("%s refused the registry config but wrote %q", cmd[0], h)
		}
	}

	linked := "registry dir " + filepath.Join(certs, "quay.io") + " is a symlink"
	for _, cmd := range [][]string{{"sync"}, runArgs} {
		res := regRun(t, append(append(cmd, "--insecure-perms"), common...)...)
		if res.Code != 2 || !strings.Contains(res.Stderr, linked) {
			t.Errorf("%s --insecure-perms with a symlinked registry dir: exit %d; want 2 and %q\n%s", cmd[0], res.Code, linked, tail(res.Stderr, 10))
		}
		untouched(cmd[0] + " --insecure-perms")
		if h := hosts(); len(h) != 0 {
			t.Errorf("%s --insecure-perms refused the registry config but wrote %q", cmd[0], h)
		}
	}

	if err := os.Remove(filepath.Join(certs, "quay.io")); err != nil {
		t.Fatal(err)
	}
	if res := regRun(t, append([]string{"sync", "--insecure-perms"}, common...)...); res.Code != 0 {
		t.Fatalf("sync --insecure-perms without the dir link: exit %d\n%s", res.Code, tail(res.Stderr, 10))
	}
	untouched("sync --insecure-perms without the dir link")
	for _, reg := range []string{"ghcr.io", "quay.io", "docker.io"} {
		p := filepath.Join(certs, reg, "hosts.toml")
		b, err := os.ReadFile(p)
		if fi, lerr := os.Lstat(p); err != nil || lerr != nil || !fi.Mode().IsRegular() || !strings.Contains(string(b), `[host."`+regPeerMirror+`"]`) {
			t.Errorf("%s: %v %v; want a file with the peer mirror\n%s", p, err, lerr, b)
		}
	}
	if fi, err := os.Lstat(filepath.Join(certs, "ghcr.io", "hosts.toml.tmp")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the planted hosts.toml.tmp link: %v %v; want it left as it is", fi, err)
	}
}

// TestRegistryConfigKeepsOperatorsFile: in a certs.d only root may write,
// with the operator's own docker.io/hosts.toml (docker.io is one of the
// default --peer-registries), sync and the agent write the peer mirror for
// every other registry and leave docker.io's file byte for byte; the agent
// says so once in its log and as a FeatureOff event in /report.
func TestRegistryConfigKeepsOperatorsFile(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	forEachDaemon(t, func(t *testing.T, d *daemon) {
		base := tempDir(t)
		certs, imagesDir, dataDir := filepath.Join(base, "certs.d"), filepath.Join(base, "images"), filepath.Join(base, "data")
		operators := filepath.Join(certs, "docker.io", "hosts.toml")
		for _, p := range []string{imagesDir, filepath.Dir(operators)} {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		theirs := []byte("server = \"https://registry-1.docker.io\"\n\n[host.\"https://mirror.corp.example\"]\n  capabilities = [\"pull\", \"resolve\"]\n")
		if err := os.WriteFile(operators, theirs, 0o644); err != nil {
			t.Fatal(err)
		}
		others := []string{"ghcr.io", "quay.io", "registry.k8s.io", "mcr.microsoft.com", "public.ecr.aws", "gcr.io", "registry.gitlab.com"}
		check := func(when string) {
			t.Helper()
			for _, reg := range others {
				p := filepath.Join(certs, reg, "hosts.toml")
				if b, err := os.ReadFile(p); err != nil || !strings.Contains(string(b), `[host."`+regPeerMirror+`"]`) {
					t.Errorf("%s: %s: %v; want the peer mirror\n%s", when, p, err, b)
				}
			}
			if b, err := os.ReadFile(operators); err != nil || !bytes.Equal(b, theirs) {
				t.Errorf("%s: the operator's %s is now %q (%v); want it as it was", when, operators, b, err)
			}
		}
		common := []string{"--registry-config", certs, "--peer-mirror", regPeerMirror}
		res := holdfast(t, append([]string{"sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir}, common...)...)
		if res.Code != 0 || strings.Count(res.Stderr, "registry docker.io: "+operators) != 1 {
			t.Errorf("sync with the operator's %s: exit %d; want 0 and the skip said once\n%s", operators, res.Code, tail(res.Stderr, 10))
		}
		check("sync")
		if err := os.RemoveAll(filepath.Join(certs, "ghcr.io")); err != nil {
			t.Fatal(err)
		}

		agent := startAgent(t, d, dataDir, []string{imagesDir}, common...)
		var r reportJSON
		eventually(t, "the agent ready", func() bool {
			code, body := agent.get(t, "/report")
			return code == 200 && json.Unmarshal([]byte(body), &r) == nil && r.Ready
		})
		check("run")
		var off []string
		for _, ev := range r.Events {
			if ev.Reason == "FeatureOff" && strings.Contains(ev.Msg, operators) {
				off = append(off, ev.Msg)
			}
		}
		if len(off) != 1 || !strings.Contains(off[0], "docker.io") {
			t.Errorf("/report: FeatureOff events naming %s: %q; want one", operators, off)
		}
		if n := agent.logged("registry docker.io: "+operators, nil); n != 1 {
			t.Errorf("the agent logged the skip of docker.io %d times, want once\n%s", n, tail(agent.dump(), 20))
		}
		agent.stop(t)
		if len(r.Failing) != 0 {
			t.Errorf("sources failing: %+v", r.Failing)
		}
	})
}

package chart

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/fixture"
	"github.com/holdfast-project/holdfast/internal/source"
	"github.com/holdfast-project/holdfast/internal/testenv"
)

// TestAgentNeedsNoCapability backs the chart's securityContext for the holdfast container: uid 0 with every
// capability dropped and no_new_privs (setpriv), "/" read-only but for the node paths. Against a containerd the test starts (Debian's 1.6, its socket
// root's, mode 0660), holdfast sync imports and pins a root-owned 0600 archive from a 0700 dir and writes the
// marker there, status reads it back, and holdfast run serves /healthz and /readyz. The control: an archive of
// another user (mode 0600), which root reads only with CAP_DAC_OVERRIDE or CAP_DAC_READ_SEARCH, is reported
// unreadable, so the capabilities really were gone.
func TestAgentNeedsNoCapability(t *testing.T) {
	testenv.RequireRoot(t, "starts containerd and drops root's capabilities")
	ctrd, err := exec.LookPath("containerd")
	if err != nil {
		testenv.Missing(t, "containerd-1.6", "no containerd on PATH (make deps installs Debian's containerd 1.6 with apt-get)")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux) is not on PATH: %v", err)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare (util-linux) is not on PATH: %v", err)
	}
	dir := t.TempDir()
	holdfast := filepath.Join(dir, "holdfast")
	build := exec.Command("go", "build", "-o", holdfast, "./cmd/holdfast")
	build.Dir = repoRoot(t)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building holdfast: %v\n%s", err, out)
	}
	sock := startContainerd(t, ctrd, filepath.Join(dir, "containerd"))
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm()&0o007 != 0 {
		t.Fatalf("containerd's socket %s: %v (mode %v): want it closed to others, as on a node", sock, err, fi.Mode())
	}

	images := filepath.Join(dir, "images")
	mkdir(t, images, 0o700)
	archive(t, filepath.Join(images, "app.tar"), "registry.example.com/nocaps/app:1", 1)
	others := filepath.Join(dir, "others")
	mkdir(t, others, 0o755)
	other := filepath.Join(others, "other.tar")
	archive(t, other, "registry.example.com/nocaps/other:1", 2)
	if err := os.Chown(other, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")

	// noCaps runs holdfast as the pod does: in a mount namespace of its own where "/" is read-only and only the
	// test's dir (its node paths) is writable, and TMPDIR is there too (the pod's /tmp is an emptyDir).
	noCaps := func(args ...string) *exec.Cmd {
		cmd := exec.Command(unshare, append([]string{"--mount", "--propagation", "private", "--", "sh", "-c",
			`mount --bind "$0" "$0" && mount -o remount,bind,ro / && exec "$@"`, dir,
			setpriv, "--no-new-privs", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--", holdfast,
			"--address", sock, "--data-dir", data, "--log-format", "text"}, args...)...)
		cmd.Env = append(os.Environ(), "TMPDIR="+filepath.Join(dir, "tmp"))
		return cmd
	}
	mkdir(t, filepath.Join(dir, "tmp"), 0o1777)
	// The capability sets setpriv leaves.
	out, err := exec.Command(setpriv, "--no-new-privs", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--", "grep", "^Cap", "/proc/self/status").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(l); len(f) != 2 || strings.Trim(f[1], "0") != "" {
			t.Fatalf("setpriv left capabilities: %s", out)
		}
	}

	sync := noCaps("sync", "--images", images, "--images", others)
	out, err = sync.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("sync without capabilities: %v, want exit 1 for the other user's archive only\n%s", err, out)
	}
	if !strings.Contains(string(out), other) || !strings.Contains(string(out), "permission denied") {
		t.Errorf("sync does not report %s as unreadable (permission denied): the capabilities were not dropped?\n%s", other, out)
	}
	if !strings.Contains(string(out), "1 imported") {
		t.Errorf("sync without capabilities did not import app.tar:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(images, source.Marker)); err != nil {
		t.Errorf("the marker was not written into the root-owned 0700 images dir: %v", err)
	}

	out, err = noCaps("status", "-o", "json").Output()
	if err != nil {
		t.Fatalf("status without capabilities: %v", err)
	}
	var st struct {
		Images []struct {
			Name   string   `json:"name"`
			Pinned bool     `json:"pinned"`
			Owned  bool     `json:"owned"`
			Leases []string `json:"leases"`
		} `json:"images"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	found := false
	for _, img := range st.Images {
		if img.Name == "registry.example.com/nocaps/app:1" {
			found = true
			if !img.Pinned || !img.Owned || len(img.Leases) == 0 {
				t.Errorf("app:1 is %+v, want pinned, owned and leased", img)
			}
		}
		if strings.Contains(img.Name, "nocaps/other") {
			t.Errorf("%s was imported from the other user's 0600 archive", img.Name)
		}
	}
	if !found {
		t.Errorf("status lists no registry.example.com/nocaps/app:1: %s", out)
	}

	// run, as the chart runs it: serves /healthz and /readyz.
	port := freePort(t)
	run := noCaps("run", "--images", images, "--listen", fmt.Sprintf("127.0.0.1:%d", port))
	var log bytes.Buffer
	run.Stdout, run.Stderr = &log, &log
	run.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- run.Wait() }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = run.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			_ = run.Process.Kill()
			<-done
			return fmt.Errorf("holdfast run did not stop within 30s of SIGTERM")
		}
	}
	t.Cleanup(func() { _ = stop() })
	for _, path := range []string{"/healthz", "/readyz"} {
		url := fmt.Sprintf("http://127.0.0.1:%d%s", port, path)
		deadline := time.Now().Add(60 * time.Second)
		for {
			resp, err := http.Get(url)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %v (status %v) after 60s; log:\n%s", url, err, resp, log.String())
			}
			select {
			case err := <-done:
				t.Fatalf("holdfast run exited: %v\n%s", err, log.String())
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	if err := stop(); err != nil {
		t.Errorf("holdfast run without capabilities, stopped by SIGTERM: %v\n%s", err, log.String())
	}
}

func mkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

// archive writes a one-layer OCI archive of name, mode 0600.
func archive(t *testing.T, path, name string, seed int64) {
	t.Helper()
	err := fixture.Generate(context.Background(), fixture.GenerateConfig{
		Output: path,
		Format: fixture.FormatOCI,
		Image:  fixture.ImageSpec{Names: []string{name}, Layers: fixture.UniformLayers(1, 64<<10, false, seed)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startContainerd starts containerd (CRI plugin disabled) on dir and returns its socket; the test's end
// stops it and unmounts anything left under dir.
func startContainerd(t *testing.T, bin, dir string) string {
	t.Helper()
	mkdir(t, dir, 0o711)
	sock := filepath.Join(dir, "containerd.sock")
	cfg := testenv.Containerd16Config(dir, sock, false)
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		unmountUnder(t, dir)
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return sock
		}
		select {
		case <-done:
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("containerd exited early:\n%s", log)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd did not open %s within 30s", sock)
		}
	}
}

// unmountUnder unmounts every mount at or below dir, deepest first.
func unmountUnder(t *testing.T, dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	var mounts []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			mounts = append(mounts, fields[4])
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := syscall.Unmount(mounts[i], syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", mounts[i], err)
		}
	}
}

package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// Secrets planted by TestSecCredentialsNeverShown: none may appear anywhere
// holdfast writes.
const (
	secUser  = "sec-user-4f1c9a"
	secPass  = "sec-pass-9d27e3b1"
	secToken = "sec-token-77ab0c52"
)

// secAuthRegistry runs go-containerregistry's registry on 127.0.0.1 behind
// HTTP basic auth for secUser:secPass; it counts the requests it refused and
// the ones it let through.
func secAuthRegistry(t *testing.T) (host string, refused, served *atomic.Int64) {
	t.Helper()
	refused, served = &atomic.Int64{}, &atomic.Int64{}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != secUser || p != secPass {
			refused.Add(1)
			w.Header().Set("WWW-Authenticate", `Basic realm="holdfast-sec"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		served.Add(1)
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), refused, served
}

// secPush pushes img to host/repo, a registry secAuthRegistry guards.
func secPush(t *testing.T, host, repo string, img *fixture.Image) {
	t.Helper()
	var buf bytes.Buffer
	if err := fixture.WriteGGCRTarball(context.Background(), &buf, img); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	v1img, err := tarball.Image(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(host + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, v1img, remote.WithAuth(&authn.Basic{Username: secUser, Password: secPass})); err != nil {
		t.Fatalf("pushing %s: %v", r, err)
	}
}

// secRun runs holdfast with args and extra environment variables.
func secRun(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, holdfastBin, args...)
	cmd.Env = append(os.Environ(), env...)
	return runHoldfast(t, cmd)
}

// secGrep fails t for each secret found in out, naming where.
func secGrep(t *testing.T, where, out string) {
	t.Helper()
	for _, s := range []string{secUser, secPass, secToken, base64.StdEncoding.EncodeToString([]byte("token-user:" + secToken))} {
		if strings.Contains(out, s) {
			i := strings.Index(out, s)
			t.Errorf("%s shows the credential %q: …%s…", where, s, out[max(0, i-200):min(len(out), i+len(s)+50)])
		}
	}
}

// TestSecCredentialsNeverShown: registry credentials from registries.yaml
// (username/password for the registry the pull list uses, a token in auth for
// another) are used — the registry refuses pulls without them — and never
// appear in sync's debug logs, status, plan, the agent's logs and /metrics,
// or any file holdfast writes in its data dir (hosts.toml included).
func TestSecCredentialsNeverShown(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	host, refused, served := secAuthRegistry(t)
	img := build(t, fixture.ImageSpec{Names: []string{"e2e.local/sec/app:1"}})
	secPush(t, host, "sec/app:1", img)
	// Pulled through a mirror: a configs entry keyed by the bare host would
	// get a hosts.toml of its own that speaks HTTPS to it.
	ref := "mirror.sec.example.com/sec/app:1"

	regYAML := filepath.Join(filepath.Dir(dataDir), "registries.yaml")
	yaml := fmt.Sprintf(`mirrors:
  mirror.sec.example.com:
    endpoint:
      - "http://%s"
configs:
  "http://%s":
    auth:
      username: %s
      password: %s
  "token.sec.example.com":
    auth:
      auth: %s
`, host, host, secUser, secPass, base64.StdEncoding.EncodeToString([]byte("token-user:"+secToken)))
	if err := os.WriteFile(regYAML, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(imagesDir, "pull.txt"), []byte(ref+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"--address", d.Address, "--data-dir", dataDir, "--images", imagesDir, "--registries-yaml", regYAML, "--log-level", "debug"}

	refusedBefore, servedBefore := refused.Load(), served.Load()
	res := holdfast(t, append([]string{"sync"}, common...)...)
	if res.Code != 0 {
		t.Fatalf("sync exited %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	d.requirePinned(t, ref)
	if served.Load() == servedBefore {
		t.Fatal("the registry served nothing with the credentials: the pull did not use them")
	}
	if refused.Load() == refusedBefore {
		t.Log("the registry refused no request: the client sent the credentials up front")
	}
	secGrep(t, "sync (stdout)", res.Stdout)
	secGrep(t, "sync (debug log)", res.Stderr)

	for _, args := range [][]string{{"status"}, {"status", "-o", "json"}, {"plan"}, {"plan", "-o", "json"}} {
		res := holdfast(t, append(args, common...)...)
		if res.Code != 0 {
			t.Fatalf("%v exited %d\n%s\n%s", args, res.Code, res.Stdout, res.Stderr)
		}
		secGrep(t, strings.Join(args, " "), res.Stdout+res.Stderr)
	}

	// The agent: a pass that pulls a second tag, then /metrics, /healthz, /readyz.
	img2 := build(t, fixture.ImageSpec{Names: []string{"e2e.local/sec/app:2"}})
	secPush(t, host, "sec/app:2", img2)
	ref2 := "mirror.sec.example.com/sec/app:2"
	if err := os.WriteFile(filepath.Join(imagesDir, "pull.txt"), []byte(ref+"\n"+ref2+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, d, dataDir, []string{imagesDir}, "--registries-yaml", regYAML)
	d.waitPinned(t, ref2)
	eventually(t, "the agent's first pass", func() bool { return a.logged("pass:", nil) > 0 })
	for _, p := range []string{"/metrics", "/healthz", "/readyz"} {
		_, body := a.get(t, p)
		secGrep(t, "GET "+p, body)
	}
	a.stop(t)
	secGrep(t, "holdfast run (debug log)", a.dump())

	// Nothing holdfast keeps in its data dir holds them either (the
	// credentials stay in registries.yaml, mode 0600, and in memory).
	err := filepath.WalkDir(dataDir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !e.Type().IsRegular() {
			return nil
		}
		if fi, err := e.Info(); err != nil || fi.Size() > 1<<20 {
			return nil
		}
		b, err := os.ReadFile(p)
		if err == nil {
			secGrep(t, p, string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "registry.d", "mirror.sec.example.com", "hosts.toml")); err != nil {
		t.Errorf("registries.yaml's mirror was not written as a hosts.toml (the data dir check saw less than it should): %v", err)
	}
}

// secChown sets the owner and mode of path.
func secChown(t *testing.T, path string, uid, gid int, mode os.FileMode) {
	t.Helper()
	if err := os.Chown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// secStatusSources reads the sources of status -o json.
func secStatusSources(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	var st struct {
		Sources []map[string]any `json:"sources"`
	}
	readStatus(t, &st, args...)
	return st.Sources
}

// TestSecPermsPerSource: an images dir others can write (group 1000, mode
// 0775) is refused by sync with an error naming it and what is wrong, and
// the other images dir still applies (exit 1, not a crash); --insecure-perms
// (or HOLDFAST_INSECURE_PERMS) reads it. Refused later, what it brought stays
// pinned, as for a dir that cannot be read. An archive symlinked into an
// images dir is read through the link, and status names its target.
func TestSecPermsPerSource(t *testing.T) {
	d, _, dataDir := embeddedScene(t)
	base := filepath.Dir(dataDir)
	good, lax, store := filepath.Join(base, "good"), filepath.Join(base, "lax"), filepath.Join(base, "store")
	goodImg := build(t, fixture.ImageSpec{Names: []string{"e2e.local/sec/good:1"}})
	laxImg := build(t, fixture.ImageSpec{Names: []string{"e2e.local/sec/lax:1"}})
	linkedImg := build(t, fixture.ImageSpec{Names: []string{"e2e.local/sec/linked:1"}})
	oci := func(img *fixture.Image) func(context.Context, io.Writer) error {
		return func(ctx context.Context, w io.Writer) error {
			return fixture.WriteOCI(ctx, w, fixture.OCIOptions{Names: fixture.NameContainerd}, img)
		}
	}
	writeArchive(t, filepath.Join(good, "good.tar"), fixture.None, fixture.CompressOptions{}, oci(goodImg))
	writeArchive(t, filepath.Join(lax, "lax.tar"), fixture.None, fixture.CompressOptions{}, oci(laxImg))
	writeArchive(t, filepath.Join(store, "linked.tar"), fixture.None, fixture.CompressOptions{}, oci(linkedImg))
	link := filepath.Join(good, "linked.tar")
	if err := os.Symlink(filepath.Join(store, "linked.tar"), link); err != nil {
		t.Fatal(err)
	}
	secChown(t, lax, 0, 1000, 0o775)

	res := d.sync(t, dataDir, good, lax)
	want := "images dir " + lax + " is writable by group 1000 (mode 0775); fix the mode or owner, or pass --insecure-perms"
	if res.Code != 1 || !strings.Contains(res.Stderr+res.Stdout, want) {
		t.Fatalf("sync with a group-writable images dir: exit %d, want 1 and %q\n%s\n%s", res.Code, want, res.Stdout, res.Stderr)
	}
	d.requirePinned(t, "e2e.local/sec/good:1", "e2e.local/sec/linked:1")
	if _, ok := d.record(t, "e2e.local/sec/lax:1"); ok {
		t.Error("the image of the refused dir was imported")
	}
	var target any
	for _, s := range secStatusSources(t, "--address", d.Address, "--data-dir", dataDir) {
		if s["path"] == link {
			target = s["target"]
		}
	}
	if target != filepath.Join(store, "linked.tar") {
		t.Errorf("status: the symlinked source's target is %v, want %s", target, filepath.Join(store, "linked.tar"))
	}

	// Allowed by the env var, then by the flag.
	cmd := []string{"sync", "--address", d.Address, "--data-dir", dataDir, "--images", good, "--images", lax}
	if res := secRun(t, []string{"HOLDFAST_INSECURE_PERMS=true"}, cmd...); res.Code != 0 {
		t.Fatalf("sync with HOLDFAST_INSECURE_PERMS=true exited %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	d.requirePinned(t, "e2e.local/sec/lax:1")
	if res := secRun(t, nil, append(cmd, "--insecure-perms")...); res.Code != 0 {
		t.Fatalf("sync --insecure-perms exited %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}

	// Refused again: a failure of that source only; what it brought stays.
	res = secRun(t, nil, cmd...)
	if res.Code != 1 || !strings.Contains(res.Stderr+res.Stdout, want) {
		t.Fatalf("sync refusing the dir again: exit %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	if c := summaryCounts(t, res.Stdout); c["unpinned"] != 0 || c["released"] != 0 {
		t.Errorf("refusing a dir unpinned or released what it brought: %v", c)
	}
	d.requirePinned(t, "e2e.local/sec/good:1", "e2e.local/sec/lax:1", "e2e.local/sec/linked:1")
}

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/holdfast-project/holdfast/internal/embedded"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

const namespace = "k8s.io"

// daemon is a real containerd the suite started.
type daemon struct {
	Name    string
	Address string
	Old     bool // Debian's containerd 1.6: its CRI never reports pins (every other line does)
	Client  *containerd.Client
	PID     int // the containerd process
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "needs root: the suite starts containerd with the overlayfs snapshotter")
	}
}

// line is a containerd build a test runs against, by its subtest's name.
type line struct {
	name  string
	start func(*testing.T) *daemon
}

// fullLines run the whole suite: the embedded containerd (2.4) and Debian's 1.6.
var fullLines = []line{{"embedded", startEmbedded}, {"debian-1.6", startDebian}}

// matrixLines are fullLines and the lines the core runs on too (testenv.Lines: 1.7, 2.2, 2.3 and K3s's fork).
func matrixLines() []line {
	lines := slices.Clone(fullLines)
	for _, l := range testenv.Lines {
		lines = append(lines, line{"containerd-" + l.Name, func(t *testing.T) *daemon { return startLine(t, l) }})
	}
	return lines
}

// forEachDaemon runs fn against the embedded containerd and Debian's 1.6, each in its own subtest.
func forEachDaemon(t *testing.T, fn func(t *testing.T, d *daemon)) {
	t.Helper()
	forLines(t, fullLines, fn)
}

// forEachLine runs fn against every containerd build of the matrix, each in its own subtest: the core of the
// suite (what holdfast must do on every containerd the field runs).
func forEachLine(t *testing.T, fn func(t *testing.T, d *daemon)) {
	t.Helper()
	forLines(t, matrixLines(), fn)
}

func forLines(t *testing.T, lines []line, fn func(t *testing.T, d *daemon)) {
	t.Helper()
	for _, c := range lines {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fn(t, c.start(t))
		})
	}
}

// startEmbedded starts holdfast's embedded containerd in a temp dir.
func startEmbedded(t *testing.T) *daemon {
	t.Helper()
	requireRoot(t)
	p := startContainerd(t, tempDir(t), holdfastBin)
	d := connect(t, "embedded", p.Address(), false)
	d.PID = p.PID()
	return d
}

// startContainerd starts the embedded containerd on dataDir, run as
// `<bin> containerd --config F`, and stops it after the test.
func startContainerd(t *testing.T, dataDir, bin string) *embedded.Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := embedded.Start(ctx, dataDir, embedded.Options{Binary: bin})
	if err != nil {
		t.Fatalf("starting embedded containerd: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("stopping embedded containerd: %v", err)
		}
	})
	return p
}

// embeddedScene is the set-up of a test on its own embedded containerd: the
// daemon, an images dir and a data dir (neither created).
func embeddedScene(t *testing.T) (d *daemon, imagesDir, dataDir string) {
	t.Helper()
	requireRoot(t)
	t.Parallel()
	d = startEmbedded(t)
	dir := tempDir(t)
	return d, filepath.Join(dir, "images"), filepath.Join(dir, "data")
}

// startDebian starts Debian's containerd 1.6 (apt-get install containerd) in a temp dir.
func startDebian(t *testing.T) *daemon {
	return startDebianWith(t, true)
}

// startLine starts the line's containerd (scripts/containerd-lines.sh builds it) in a temp dir, its CRI on.
func startLine(t *testing.T, l testenv.Line) *daemon {
	t.Helper()
	return newLine(t, l).start() // every line of the matrix reports pins through its CRI (1.7 from 1.7.10)
}

// newLine is the line's containerd on a temp dir of its own, not started.
func newLine(t *testing.T, l testenv.Line) *external {
	t.Helper()
	requireRoot(t)
	bin, why := l.Binary()
	if why != "" {
		testenv.Missing(t, "containerd-lines", why)
	}
	dir := tempDir(t)
	p := &external{t: t, name: "containerd-" + l.Name, bin: bin, dir: dir, sock: filepath.Join(dir, "c.sock"), cfgPath: filepath.Join(dir, "config.toml")}
	if err := os.WriteFile(p.cfgPath, []byte(l.CRIConfig(dir, p.sock)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop()
		unmountUnder(t, dir)
	})
	return p
}

// startDebianWith starts Debian's containerd 1.6, with its CRI plugin or
// with the plugin disabled.
func startDebianWith(t *testing.T, cri bool) *daemon {
	t.Helper()
	return newDebian(t, cri).start()
}

// external is a containerd the suite runs from its own binary (Debian's 1.6, a line of the matrix) on a temp
// dir of its own, to start, stop and start again on the same root. The test's end stops it.
type external struct {
	t             *testing.T
	name          string
	bin, dir      string
	sock, cfgPath string
	old           bool // its CRI never reports pins (Debian's 1.6)
	cmd           *exec.Cmd
	done          chan struct{}
}

func newDebian(t *testing.T, cri bool) *external {
	t.Helper()
	requireRoot(t)
	bin, err := exec.LookPath("containerd")
	if err != nil {
		testenv.Missing(t, "containerd-1.6", "Debian's containerd 1.6 is not installed (make deps installs it with apt-get)")
	}
	if why := testenv.Not16(bin); why != "" {
		testenv.Missing(t, "containerd-1.6", why)
	}
	dir := tempDir(t)
	p := &external{t: t, name: "debian-1.6", old: true, bin: bin, dir: dir, sock: filepath.Join(dir, "c.sock"), cfgPath: filepath.Join(dir, "config.toml")}
	cfg := testenv.Containerd16CRIConfig(dir, p.sock)
	if !cri {
		cfg = testenv.Containerd16Config(dir, p.sock, false)
		p.name = "debian-1.6-no-cri"
	}
	if err := os.WriteFile(p.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop()
		unmountUnder(t, dir)
	})
	return p
}

// start starts containerd and waits until it answers.
func (p *external) start() *daemon {
	t := p.t
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(p.dir, "containerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	_ = os.Remove(p.sock) // an earlier run's, if it left it
	cmd := exec.Command(p.bin, "--config", p.cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.done = cmd, done
	eventually(t, p.name+" to create its socket", func() bool {
		select {
		case <-done:
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("%s exited early:\n%s", p.name, tail(string(log), 20))
		default:
		}
		_, err := os.Stat(p.sock)
		return err == nil
	})
	d := connect(t, p.name, p.sock, p.old)
	d.PID = cmd.Process.Pid
	return d
}

// stop stops containerd, if it runs.
func (p *external) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	p.cmd = nil
}

func connect(t *testing.T, name, address string, old bool) *daemon {
	t.Helper()
	c, err := containerd.New(address, containerd.WithDefaultNamespace(namespace), containerd.WithTimeout(30*time.Second))
	if err != nil {
		t.Fatalf("connecting to %s: %v", name, err)
	}
	t.Cleanup(func() { c.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := c.Version(context.Background()); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%s does not answer: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return &daemon{Name: name, Address: address, Old: old, Client: c}
}

// tempDir is a short temp dir (unix socket paths must stay under 108 bytes),
// removed after the test once nothing is mounted under it.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unmountUnder(t, dir)
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
	})
	return dir
}

// unmountUnder unmounts whatever is still mounted below dir, deepest first.
func unmountUnder(t *testing.T, dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			points = append(points, fields[4])
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", p, err)
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// result is one finished holdfast process.
type result struct {
	Stdout, Stderr string
	Code           int
}

// holdfast runs the holdfast binary with args and waits for it.
func holdfast(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return runHoldfast(t, exec.CommandContext(ctx, holdfastBin, args...))
}

// readStatus runs `holdfast status -o json` with args and decodes its
// output into v.
func readStatus(t *testing.T, v any, args ...string) {
	t.Helper()
	res := holdfast(t, append([]string{"status", "-o", "json"}, args...)...)
	if res.Code != 0 {
		t.Fatalf("status exited %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	if err := json.Unmarshal([]byte(res.Stdout), v); err != nil {
		t.Fatalf("reading status -o json: %v\n%s", err, res.Stdout)
	}
}

// runHoldfast runs a holdfast command (logging JSON; with cmd.Env, or the
// test's environment when it is nil) and returns what it
// printed and its exit code; a command that cannot run at all fails the test.
func runHoldfast(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, "HOLDFAST_LOG_FORMAT=json")
	err := cmd.Run()
	res := result{Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.Code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running %v: %v", cmd.Args, err)
	}
	return res
}

// sync runs `holdfast sync` against d with the given images dirs.
func (d *daemon) sync(t *testing.T, dataDir string, imageDirs ...string) result {
	t.Helper()
	args := []string{"sync", "--address", d.Address, "--data-dir", dataDir}
	for _, dir := range imageDirs {
		args = append(args, "--images", dir)
	}
	return holdfast(t, args...)
}

func (d *daemon) ctx() context.Context {
	return namespaces.WithNamespace(context.Background(), namespace)
}

// record reads one image record. Only NotFound means there is none; any
// other error fails the test.
func (d *daemon) record(t *testing.T, name string) (images.Image, bool) {
	t.Helper()
	img, err := d.Client.ImageService().Get(d.ctx(), name)
	if errdefs.IsNotFound(err) {
		return images.Image{}, false
	}
	if err != nil {
		t.Fatalf("reading record %s: %v", name, err)
	}
	return img, true
}

// recordNames lists every record name (the CRI's sha256: records too).
func (d *daemon) recordNames(t *testing.T) []string {
	t.Helper()
	imgs, err := d.Client.ImageService().List(d.ctx())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, img := range imgs {
		names = append(names, img.Name)
	}
	sort.Strings(names)
	return names
}

// holdfastLeases lists holdfast's leases, but those of content-root probes
// (invProbeLeases checks them).
func (d *daemon) holdfastLeases(t *testing.T) []leases.Lease {
	t.Helper()
	all, err := d.Client.LeasesService().List(d.ctx())
	if err != nil {
		t.Fatal(err)
	}
	var out []leases.Lease
	for _, l := range all {
		if strings.HasPrefix(l.ID, "holdfast/") && l.Labels[invProbe] == "" {
			out = append(out, l)
		}
	}
	return out
}

// leaseOf finds the lease of the source at path.
func (d *daemon) leaseOf(t *testing.T, path string) (leases.Lease, bool) {
	t.Helper()
	for _, l := range d.holdfastLeases(t) {
		if l.Labels["io.holdfast.source"] == path {
			return l, true
		}
	}
	return leases.Lease{}, false
}

// leaseContent lists the content digests a lease holds.
func (d *daemon) leaseContent(t *testing.T, l leases.Lease) map[digest.Digest]bool {
	t.Helper()
	res, err := d.Client.LeasesService().ListResources(d.ctx(), l)
	if err != nil {
		t.Fatal(err)
	}
	out := map[digest.Digest]bool{}
	for _, r := range res {
		if r.Type == "content" {
			out[digest.Digest(r.ID)] = true
		}
	}
	return out
}

// hostBlobs lists the blobs of the host platform's image under target, read from the store.
func (d *daemon) hostBlobs(t *testing.T, target ocispec.Descriptor) []ocispec.Descriptor {
	t.Helper()
	var out []ocispec.Descriptor
	h := images.HandlerFunc(func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		out = append(out, desc)
		return images.Children(ctx, d.Client.ContentStore(), desc)
	})
	handler := images.LimitManifests(images.FilterPlatforms(h, platforms.Default()), platforms.Default(), 1)
	if err := images.Walk(d.ctx(), handler, target); err != nil {
		t.Fatalf("walking %s: %v", target.Digest, err)
	}
	return out
}

// ingests lists unfinished ingests.
func (d *daemon) ingests(t *testing.T) []string {
	t.Helper()
	sts, err := d.Client.ContentStore().ListStatuses(d.ctx())
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, s := range sts {
		refs = append(refs, s.Ref)
	}
	return refs
}

// hasBlob reports whether the store has a blob. Only NotFound means it has
// not; any other error fails the test.
func (d *daemon) hasBlob(t *testing.T, dg digest.Digest) bool {
	t.Helper()
	_, err := d.Client.ContentStore().Info(d.ctx(), dg)
	if errdefs.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatalf("reading blob %s: %v", dg, err)
	}
	return true
}

// criImage asks the CRI image service about an image: whether it is known and pinned.
func (d *daemon) criImage(t *testing.T, name string) (found, pinned bool) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+d.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := runtimeapi.NewImageServiceClient(conn).ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: name}})
	if err != nil {
		t.Fatalf("CRI ImageStatus %s: %v", name, err)
	}
	if resp.Image == nil {
		return false, false
	}
	return true, resp.Image.Pinned
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/holdfast-project/holdfast/internal/embedded/daemon"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

// childEnvVar makes the test binary act as holdfast-containerd: Start runs
// os.Args[0] (this test binary) with `containerd --config F`, and TestMain
// hands those arguments to daemon.Main, as cmd/holdfast-containerd does.
const childEnvVar = "HOLDFAST_EMBEDDED_CHILD"

// With childEnvVar set to childNeverReady, the child never serves: it writes
// its pid to the file named by childPIDEnvVar, says so in its log, and waits
// for SIGTERM.
const (
	childNeverReady = "never-ready"
	childPIDEnvVar  = "HOLDFAST_EMBEDDED_CHILD_PID_FILE"
	childNeverLine  = "test child: started, never serving"
)

func TestMain(m *testing.M) {
	switch os.Getenv(childEnvVar) {
	case "1":
		os.Exit(daemon.Main(os.Args[1:]))
	case childNeverReady:
		os.Exit(neverReady())
	}
	os.Exit(m.Run())
}

func neverReady() int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	fmt.Println(childNeverLine)
	if err := os.WriteFile(os.Getenv(childPIDEnvVar), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		fmt.Println(err)
		return 1
	}
	<-term
	return 0
}

func testOptions(t *testing.T) Options {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real containerd; skipped with -short")
	}
	requireRoot(t)
	t.Setenv(childEnvVar, "1")
	return Options{Binary: os.Args[0]}
}

func TestStartStop(t *testing.T) {
	opts := testOptions(t)
	data := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	begin := time.Now()
	p, err := Start(ctx, data, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("containerd pid %d ready in %v (snapshotter %s)", p.PID(), time.Since(begin), p.Layout().Snapshotter)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = p.Stop(context.Background())
		}
	})

	l := p.Layout()
	if p.Address() != filepath.Join(data, "containerd", "containerd.sock") {
		t.Errorf("Address = %q", p.Address())
	}

	// The snapshotter: auto-detection picked what really works here, and
	// containerd loaded it (it is a required plugin, and has its root).
	want := SnapshotterNative
	if overlayWorks(t) {
		want = SnapshotterOverlayFS
	}
	if l.Snapshotter != want {
		t.Errorf("snapshotter = %q, want %q", l.Snapshotter, want)
	}
	if _, err := os.Stat(filepath.Join(l.Root, "io.containerd.snapshotter.v1."+l.Snapshotter)); err != nil {
		t.Errorf("snapshotter root missing: %v", err)
	}

	conn, err := grpc.NewClient("unix://"+p.Address(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := grpc_health_v1.NewHealthClient(conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING {
		t.Fatalf("health check: %v %v", resp, err)
	}
	// The CRI image service answers without runc or CNI.
	if _, err := criapi.NewImageServiceClient(conn).ListImages(ctx, &criapi.ListImagesRequest{}); err != nil {
		t.Errorf("CRI ListImages: %v", err)
	}

	// A second containerd on the same data dir is refused.
	if _, err := Start(ctx, data, opts); err == nil || !strings.Contains(err.Error(), "already serves") {
		t.Errorf("second Start on the same data dir: %v, want an 'already serves' error", err)
	}

	// Something left mounted under the state dir, as a crashed container
	// or unpack would leave it: Stop must unmount it.
	leak := filepath.Join(l.State, "leaked-mount")
	if err := os.MkdirAll(leak, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", leak, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(leak, "inner"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", filepath.Join(leak, "inner"), "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}

	pid := p.PID()
	begin = time.Now()
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped = true
	t.Logf("stopped in %v", time.Since(begin))
	select {
	case <-p.Done():
	default:
		t.Error("Done not closed after Stop")
	}
	if err := p.Err(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pid %d still exists after Stop: kill(0) = %v", pid, err)
	}
	points, err := mountPointsUnder(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != 0 {
		t.Errorf("mounts left under the data dir: %v", points)
	}
	if err := p.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}

	// The log got containerd's output, with the version set or not.
	b, err := os.ReadFile(l.Log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "containerd successfully booted") {
		t.Errorf("log %s lacks the boot message:\n%s", l.Log, b)
	}

	// Restart on the same data dir: the store survives a stop.
	begin = time.Now()
	p2, err := Start(ctx, data, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted in %v", time.Since(begin))

	// Stop with no grace period left: SIGTERM, then at once SIGKILL to
	// the group; still nothing may be left.
	pid = p2.PID()
	expired, cancelExpired := context.WithCancel(ctx)
	cancelExpired()
	if err := p2.Stop(expired); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pid %d still exists after Stop: kill(0) = %v", pid, err)
	}
	if points, err := mountPointsUnder(data); err != nil || len(points) != 0 {
		t.Errorf("mounts left under the data dir: %v %v", points, err)
	}
}

func TestStartChildExitsEarly(t *testing.T) {
	opts := testOptions(t)
	// zfs can't load on a data dir that is not on ZFS, and the config makes
	// the chosen snapshotter a required plugin: containerd exits at once.
	opts.Snapshotter = "zfs"
	data := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	begin := time.Now()
	p, err := Start(ctx, data, opts)
	if err == nil {
		_ = p.Stop(ctx)
		t.Fatal("Start succeeded with the zfs snapshotter on a non-ZFS data dir")
	}
	t.Logf("failed after %v: %v", time.Since(begin), err)
	for _, want := range []string{"exited before it was ready", "last lines of", "io.containerd.snapshotter.v1.zfs"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
	points, err := mountPointsUnder(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != 0 {
		t.Errorf("mounts left under the data dir: %v", points)
	}
}

// TestStartGivesUpWhenCtxEnds: a child that never becomes ready holds Start
// until its ctx ends; then Start stops the child and says why.
func TestStartGivesUpWhenCtxEnds(t *testing.T) {
	opts := testOptions(t)
	t.Setenv(childEnvVar, childNeverReady)
	pidFile := filepath.Join(t.TempDir(), "pid")
	t.Setenv(childPIDEnvVar, pidFile)
	data := t.TempDir()

	// End the start only once the child runs.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		defer cancel()
		stop := time.Now().Add(time.Minute)
		for time.Now().Before(stop) {
			if _, err := os.Stat(pidFile); err == nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Error("the child never wrote its pid")
	}()
	p, err := Start(ctx, data, opts)
	if err == nil {
		_ = p.Stop(context.Background())
		t.Fatal("Start succeeded with a child that never serves")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v does not report the ended ctx", err)
	}
	if !strings.Contains(err.Error(), childNeverLine) {
		t.Errorf("error does not end with the child's log:\n%v", err)
	}
	b, rerr := os.ReadFile(pidFile)
	if rerr != nil {
		t.Fatal(rerr)
	}
	pid, rerr := strconv.Atoi(string(b))
	if rerr != nil {
		t.Fatal(rerr)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("child pid %d still exists after the failed start: kill(0) = %v", pid, err)
	}
	l := Paths(data)
	if serving(l.Address) {
		t.Errorf("something still serves %s after the failed start", l.Address)
	}
	if points, err := mountPointsUnder(data); err != nil || len(points) != 0 {
		t.Errorf("mounts left under the data dir: %v %v", points, err)
	}
}

// TestStartOnOverlayDataDir starts containerd on a data dir that is itself an
// overlay mount (as in a container). containerd's overlayfs plugin still
// loads there, but its mounts would fail: the probe must choose native, and
// the transfer and CRI image services must work with it.
func TestStartOnOverlayDataDir(t *testing.T) {
	opts := testOptions(t)
	if !overlayWorks(t) {
		testenv.Missing(t, "overlayfs", "overlayfs does not work here")
	}
	data := overlayMount(t)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p, err := Start(ctx, data, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Stop(ctx); err != nil {
			t.Error(err)
		}
		// Only the data dir's own overlay is left.
		if points, err := mountPointsUnder(data); err != nil || len(points) != 1 {
			t.Errorf("mounts under the data dir after Stop: %v %v", points, err)
		}
	}()
	if got := p.Layout().Snapshotter; got != SnapshotterNative {
		t.Errorf("snapshotter on an overlay data dir = %q, want native", got)
	}
	conn, err := grpc.NewClient("unix://"+p.Address(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := criapi.NewImageServiceClient(conn).ListImages(ctx, &criapi.ListImagesRequest{}); err != nil {
		t.Errorf("CRI ListImages: %v", err)
	}
}

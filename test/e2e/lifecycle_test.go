package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/opencontainers/image-spec/identity"

	"github.com/holdfast-project/holdfast/internal/embedded"
	"github.com/holdfast-project/holdfast/internal/fixture"
)

type statusJSON struct {
	Images []struct {
		Name    string   `json:"name"`
		Digest  string   `json:"digest"`
		ID      string   `json:"id"`
		Size    int64    `json:"size"`
		Pinned  bool     `json:"pinned"`
		Owned   bool     `json:"owned"`
		Sources []string `json:"sources"`
		Leases  []string `json:"leases"`
	} `json:"images"`
}

// TestEmbeddedLifecycle runs the agent on its embedded containerd: a second
// process refuses the data dir, status attaches to the running agent, and on
// SIGTERM the agent stops its containerd and leaves no mount behind, though
// an unpacked image was mounted from it.
func TestEmbeddedLifecycle(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	dir := tempDir(t)
	dataDir := filepath.Join(dir, "data")
	imagesDir := filepath.Join(dataDir, "images") // the default images dir
	im := build(t, fixture.ImageSpec{Names: []string{"e2e.local/life/app:1"}})
	writeArchive(t, filepath.Join(imagesDir, "app.tar"), fixture.None, fixture.CompressOptions{},
		func(ctx context.Context, w io.Writer) error { return fixture.WriteDockerSave(ctx, w, im) })

	var runErr bytes.Buffer
	run := exec.Command(holdfastBin, "run", "--data-dir", dataDir, "--listen", "127.0.0.1:0")
	run.Stderr = &runErr
	run.Env = append(os.Environ(), "HOLDFAST_LOG_FORMAT=json")
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	t.Cleanup(func() {
		if run.ProcessState == nil {
			_ = run.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("holdfast run's log:\n%s", runErr.String())
		}
	})

	// status attaches to the agent's containerd and sees the image pinned.
	var st statusJSON
	eventually(t, "status to show the image pinned", func() bool {
		res := holdfast(t, "status", "-o", "json", "--data-dir", dataDir)
		if res.Code != 0 {
			return false
		}
		st = statusJSON{}
		if err := json.Unmarshal([]byte(res.Stdout), &st); err != nil {
			t.Fatalf("status -o json: %v\n%s", err, res.Stdout)
		}
		for _, img := range st.Images {
			if img.Name == "e2e.local/life/app:1" && img.Pinned && img.Owned {
				return true
			}
		}
		return false
	})
	for _, img := range st.Images {
		if img.Name != "e2e.local/life/app:1" {
			continue
		}
		if img.ID != im.ID().String() {
			t.Errorf("status id %s, want the config digest %s", img.ID, im.ID())
		}
		if len(img.Sources) != 1 || img.Sources[0] != filepath.Join(imagesDir, "app.tar") || len(img.Leases) != 1 {
			t.Errorf("status sources %v leases %v", img.Sources, img.Leases)
		}
		if img.Size <= 0 {
			t.Errorf("status size %d", img.Size)
		}
	}
	table := holdfast(t, "status", "--data-dir", dataDir)
	if table.Code != 0 || !strings.Contains(table.Stdout, "e2e.local/life/app:1") || !strings.Contains(table.Stdout, "PINNED") {
		t.Errorf("status table:\n%s\n%s", table.Stdout, table.Stderr)
	}

	// A sync beside the running agent refuses, naming the owner.
	res := holdfast(t, "sync", "--data-dir", dataDir)
	if res.Code == 0 || !strings.Contains(res.Stderr, "in use by holdfast run") {
		t.Errorf("second process: exit %d, stderr %q; want a refusal naming holdfast run", res.Code, res.Stderr)
	}

	// Something mounted from the agent's containerd, as a container's rootfs
	// is: the image unpacked with the overlayfs snapshotter and a view of it
	// mounted under containerd's state dir, where a shim mounts rootfs.
	target := gapMountView(t, dataDir, "e2e.local/life/app:1")
	if mounts := mountsUnder(t, dataDir); !slices.Contains(mounts, target) {
		t.Fatalf("the view is not mounted before the stop: %v", mounts)
	}

	// SIGTERM: the agent stops its containerd and leaves nothing mounted.
	if err := run.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("run exited with %v\n%s", err, runErr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("run did not stop within 60s of SIGTERM\n%s", runErr.String())
	}
	if mounts := mountsUnder(t, dataDir); len(mounts) != 0 {
		t.Errorf("mounts left under the data dir: %v", mounts)
	}
	if procs := processesMentioning(t, dataDir); len(procs) != 0 {
		t.Errorf("processes left: %v", procs)
	}
}

// TestOldContainerdWarning: against containerd 1.6.20 holdfast warns that the
// kubelet will not see pins; against every other line (1.7.35 and 2.x) it
// does not.
func TestOldContainerdWarning(t *testing.T) {
	forEachLine(t, func(t *testing.T, d *daemon) {
		dir := tempDir(t)
		imagesDir := filepath.Join(dir, "images")
		if err := os.MkdirAll(imagesDir, 0o755); err != nil {
			t.Fatal(err)
		}
		res := d.sync(t, filepath.Join(dir, "data"), imagesDir)
		if res.Code != 0 {
			t.Fatalf("sync exited %d: %s", res.Code, res.Stderr)
		}
		warned := strings.Contains(res.Stderr, "does not report pinned images")
		if warned != d.Old {
			t.Errorf("warning shown = %v, want %v; stderr:\n%s", warned, d.Old, res.Stderr)
		}
	})
}

func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// processesMentioning lists live processes whose command line names dir.
func processesMentioning(t *testing.T, dir string) []string {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if s := strings.ReplaceAll(string(cmdline), "\x00", " "); strings.Contains(s, dir) {
			out = append(out, e.Name()+": "+s)
		}
	}
	return out
}

// gapMountView unpacks name in the embedded containerd of dataDir with the
// overlayfs snapshotter, mounts a view of it under containerd's state dir,
// and returns the mount point.
func gapMountView(t *testing.T, dataDir, name string) string {
	t.Helper()
	layout := embedded.Paths(dataDir)
	c, err := containerd.New(layout.Address, containerd.WithDefaultNamespace(namespace), containerd.WithTimeout(30*time.Second))
	if err != nil {
		t.Fatalf("connecting to the agent's containerd: %v", err)
	}
	defer c.Close()
	ctx := namespaces.WithNamespace(context.Background(), namespace)
	img, err := c.GetImage(ctx, name)
	if err != nil {
		t.Fatalf("reading image %s: %v", name, err)
	}
	if err := img.Unpack(ctx, "overlayfs"); err != nil {
		t.Fatalf("unpacking %s: %v", name, err)
	}
	diffIDs, err := img.RootFS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mounts, err := c.SnapshotService("overlayfs").View(ctx, "e2e-life-view", identity.ChainID(diffIDs).String())
	if err != nil {
		t.Fatalf("making a view of %s: %v", name, err)
	}
	target := filepath.Join(layout.State, "io.containerd.runtime.v2.task", namespace, "e2e-life", "rootfs")
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := mount.All(mounts, target); err != nil {
		t.Fatalf("mounting the view of %s: %v", name, err)
	}
	return target
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/holdfast-project/holdfast/internal/embedded"
)

// profile runs one more holdfast sync of the large archive, not counted as a
// sample, on a fresh containerd whose pprof debug socket is on, and saves
// containerd's CPU profile of it under dir (`go tool pprof -top FILE` reads
// it). It shows what bounds the import on the containerd side, where most of
// its CPU time goes.
func (h *harness) profile(ctx context.Context, dir string) (err error) {
	run, err := h.newRunDir()
	if err != nil {
		return err
	}
	defer func() {
		if rerr := os.RemoveAll(run); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing %s: %w", run, rerr))
		}
	}()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := h.quiesce(); err != nil {
		return err
	}
	st, err := startStoreWith(ctx, filepath.Join(run, "containerd"),
		embedded.Options{Binary: h.cfg.Tools.Holdfast, Debug: true, LogLevel: "info"})
	if err != nil {
		return fmt.Errorf("starting containerd for the profile: %w", err)
	}
	defer func() {
		if serr := st.stop(ctx); serr != nil {
			err = errors.Join(err, serr)
		}
	}()
	// The profile covers the whole import: as long as the median import, plus 2 s.
	seconds := 30
	if s := findStat(computeStats(h.res.Samples), ScenarioP1, MethodHoldfastDirect); s != nil && s.N > 0 {
		seconds = int(math.Ceil(float64(s.Median))) + 2
	}
	out := filepath.Join(dir, "containerd-P1-holdfast.pprof")
	got := make(chan error, 1)
	go func() { got <- fetchProfile(ctx, st.proc.Layout().DebugAddress, seconds, out) }()
	time.Sleep(100 * time.Millisecond) // the profile starts when the request arrives
	_, syncErr := h.runSync(ctx, st, WriteDirect, filepath.Join(run, "holdfast"), h.arch.GroupDir("large"), filepath.Join(run, "sync"))
	if err := errors.Join(syncErr, <-got); err != nil {
		return fmt.Errorf("profiling containerd during holdfast sync: %w", err)
	}
	h.logf("saved containerd's CPU profile of a holdfast sync of the large archive: %s", out)
	return nil
}

// fetchProfile asks containerd's debug socket for a CPU profile of seconds
// and writes it to path.
func fetchProfile(ctx context.Context, socket string, seconds int, path string) error {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://containerd/debug/pprof/profile?seconds=%d", seconds), nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("fetching the CPU profile from %s: %w", socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetching the CPU profile from %s: %s", socket, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

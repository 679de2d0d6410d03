package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// peerPinTimeout bounds one P8 peer sample: from the start of A's import
// until B's record is pinned.
const peerPinTimeout = 5 * time.Minute

// p8 measures, on the large archive, alternating round by round: the time
// from starting `holdfast import` on node A until node B, whose `holdfast
// run --pull-required` is told (PUT /required) it needs the image as soon as
// A's import has exited, holds it pinned, pulled from A's spegel through its
// own (peerPair); and `holdfast import` of the same archive on a fresh node B
// itself. Each peer sample starts both nodes afresh.
func (h *harness) p8(ctx context.Context) error {
	if why := peersMissing(); why != "" {
		h.logf("skipping P8: %s", why)
		return nil
	}
	large := h.arch.Large
	local := h.holdfastImport(ScenarioP8, MethodImportOnB, large)
	for round := 1; round <= h.cfg.Rounds; round++ {
		s, err := h.measurePeer(ctx, large, round)
		if err != nil {
			return err
		}
		h.record(s)
		if s, err = h.measureCold(ctx, local, round); err != nil {
			return err
		}
		h.record(s)
	}
	return nil
}

// importArgs is the command line of a holdfast import of path.
func importArgs(address, dataDir, path string) []string {
	return []string{"import", "--address", address, "--write-path", WriteDirect, "--data-dir", dataDir, path}
}

// holdfastImport is one `holdfast import` of a, on a fresh containerd.
func (h *harness) holdfastImport(scenario, method string, a Archive) coldMethod {
	return coldMethod{
		scenario: scenario, method: method, containerd: true, names: a.Names, pinned: true, bytes: a.Bytes,
		run: func(ctx context.Context, env coldEnv) (procRun, error) {
			return runProc(ctx, filepath.Join(env.dir, "import"), h.cfg.Tools.Holdfast,
				importArgs(env.st.Address(), filepath.Join(env.dir, "holdfast"), a.Path)...)
		},
	}
}

// measurePeer is one peer sample of archive a (one image) on two fresh
// nodes: Seconds from the start of A's import until B's record carries both
// pin labels (B's image events wake the check, and a 20 ms tick),
// ImportSeconds until A's import exited. The client CPU is A's import, B's
// agent and both spegels meanwhile; the containerd CPU both containerds'.
// The error is only for what stops the harness; a failed run is in the
// sample.
func (h *harness) measurePeer(ctx context.Context, a Archive, round int) (s Sample, err error) {
	s = Sample{Scenario: ScenarioP8, Method: MethodPeer, Round: round, Bytes: a.Bytes}
	dir, err := h.newRunDir()
	if err != nil {
		return s, err
	}
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing %s: %w", dir, rerr))
		}
	}()
	if err := h.quiesce(); err != nil {
		return s, err
	}
	name := a.Names[0]
	registry, _, _ := strings.Cut(name, "/")
	p, err := h.startPeers(ctx, dir, registry)
	if ctx.Err() != nil {
		return s, ctx.Err()
	}
	if err != nil {
		s.Error = fmt.Sprintf("starting the two nodes: %v", err)
		return s, nil
	}
	defer func() { err = errors.Join(err, p.stop()) }()
	w := newPinWatcher(ctx, p.b)
	defer w.close()
	if err := sleep(ctx, 500*time.Millisecond); err != nil { // let the subscription go live
		return s, err
	}

	clients0, cd0 := p.cpu()
	busy0, self0 := machineBusy(), selfCPU()
	start := time.Now()
	r, runErr := runProc(ctx, filepath.Join(dir, "import-a"), h.cfg.Tools.Holdfast, importArgs(p.a.Address(), p.aData, a.Path)...)
	s.ImportSeconds = time.Since(start).Seconds()
	if runErr == nil {
		runErr = p.require(ctx, name)
	}
	if runErr == nil {
		var at time.Time
		at, runErr = w.waitPinned(ctx, name, peerPinTimeout)
		s.Seconds = at.Sub(start).Seconds()
	}
	clients1, cd1 := p.cpu()
	busy1, self1 := machineBusy(), selfCPU()
	if ctx.Err() != nil {
		return s, ctx.Err()
	}
	client, cd := r.CPU+clients1-clients0, cd1-cd0
	s.ClientCPUSeconds, s.ContainerdCPUSeconds = client.Seconds(), cd.Seconds()
	s.OtherCPUSeconds = max(busy1-busy0-(self1-self0)-client-cd, 0).Seconds()
	s.MaxRSSBytes = r.MaxRSS
	if runErr == nil {
		runErr = p.b.checkImages(ctx, a.Names, true)
	}
	if runErr == nil {
		runErr = p.agent.alive()
	}
	if runErr != nil {
		s.Error = runErr.Error()
	}
	return s, nil
}

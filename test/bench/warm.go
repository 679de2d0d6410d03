package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"
)

// warm measures P3 on one containerd that keeps running: holdfast imports the
// warm archives once, then each round runs, in turn, `holdfast sync` again
// (its data dir kept, as at a restart), `holdfast sync` with a new data dir
// (the cache lost; the desired state is on the leases in containerd),
// `holdfast version` (what starting the binary alone costs), and ctr
// re-importing every archive with --local (what K3s does at every start).
// ctr --local updates only the target of existing records (the same target),
// so holdfast's labels survive it; each warm sync must find every source
// unchanged and heal nothing, or its sample fails.
func (h *harness) warm(ctx context.Context) (err error) {
	dir, err := h.newRunDir()
	if err != nil {
		return err
	}
	if err := h.quiesce(); err != nil {
		return err
	}
	st, err := startStore(ctx, filepath.Join(dir, "containerd"), h.cfg.Tools.Holdfast)
	if err != nil {
		return fmt.Errorf("starting containerd for P3: %w", err)
	}
	defer func() {
		if serr := st.stop(ctx); serr != nil {
			err = errors.Join(err, serr)
		}
	}()
	h.noteVersion(ctx, st)
	images := h.arch.GroupDir("warm")
	names := Names(h.arch.Warm...)
	dataDir := filepath.Join(dir, "holdfast")

	setup := h.measureWarm(ctx, st, MethodHoldfastSetup, 1, names, func() (procRun, error) {
		return h.runSync(ctx, st, WriteDirect, dataDir, images, filepath.Join(dir, "setup"))
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	h.record(setup)
	if setup.Error != "" {
		return fmt.Errorf("P3: the first import of the warm archives failed: %s", setup.Error)
	}

	for round := 1; round <= h.cfg.Rounds; round++ {
		for _, m := range []struct {
			method string
			run    func() (procRun, error)
		}{
			{MethodHoldfastWarm, func() (procRun, error) {
				return h.runWarmSync(ctx, st, dataDir, images, filepath.Join(dir, "warm-"+strconv.Itoa(round)))
			}},
			{MethodHoldfastNoCache, func() (procRun, error) {
				fresh := filepath.Join(dir, "holdfast-new-"+strconv.Itoa(round))
				return h.runWarmSync(ctx, st, fresh, images, filepath.Join(dir, "nocache-"+strconv.Itoa(round)))
			}},
			{MethodProcessStart, func() (procRun, error) {
				return runProc(ctx, filepath.Join(dir, "version-"+strconv.Itoa(round)), h.cfg.Tools.Holdfast, "version", "--write-path", WriteDirect)
			}},
			{MethodCtrLocal, func() (procRun, error) {
				return h.runCtrImports(ctx, st, filepath.Join(dir, "ctr-"+strconv.Itoa(round)), true, h.arch.Warm)
			}},
		} {
			if err := h.quiesce(); err != nil {
				return err
			}
			s := h.measureWarm(ctx, st, m.method, round, names, m.run)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			h.record(s)
		}
	}
	return nil
}

// runWarmSync is a holdfast sync that must find every source unchanged.
func (h *harness) runWarmSync(ctx context.Context, st *store, dataDir, images, logBase string) (procRun, error) {
	r, err := h.runSync(ctx, st, WriteDirect, dataDir, images, logBase)
	if err != nil {
		return r, err
	}
	sum, err := parseSummary(r.Stdout)
	if err != nil {
		return r, err
	}
	if sum.Imported != 0 || sum.Healed != 0 || sum.Unchanged != len(h.arch.Warm) {
		return r, fmt.Errorf("a warm sync of %d unchanged archives did work: %s", len(h.arch.Warm), summaryLine(r.Stdout))
	}
	return r, nil
}

// measureWarm times run on the running store and checks that every warm
// image is still there and pinned afterwards.
func (h *harness) measureWarm(ctx context.Context, st *store, method string, round int, names []string, run func() (procRun, error)) Sample {
	s := Sample{Scenario: ScenarioP3, Method: method, Round: round}
	meter := startMeter(st)
	r, err := run()
	s.Seconds = r.Wall.Seconds()
	s.ClientCPUSeconds = r.CPU.Seconds()
	s.MaxRSSBytes = r.MaxRSS
	s.Summary = summaryLine(r.Stdout)
	meter.finish(&s, r.CPU)
	if err == nil {
		err = st.checkImages(ctx, names, true)
	}
	if err != nil {
		s.Error = err.Error()
	}
	return s
}

// settleGap is the pause between latency samples, so the CRI's follow-up
// events of one sample do not land in the next.
const settleGap = 200 * time.Millisecond

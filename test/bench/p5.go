package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// p5Rounds is how often P5 imports its archive with each write path: one
// round, as its measure is a peak (the RSS), not a time; it saves minutes.
const p5Rounds = 1

// p5 measures the peak RSS of a cold `holdfast sync` of the huge archive,
// --write-path=direct and =stream, each on a fresh embedded containerd. The
// archive is generated first and deleted when the group is done.
func (h *harness) p5(ctx context.Context) (err error) {
	dir := filepath.Join(h.work, "p5")
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing P5's archive: %w", rerr))
		}
	}()
	images := filepath.Join(dir, "huge")
	a, err := GenerateHuge(ctx, images, h.cfg.Set)
	if err != nil {
		return fmt.Errorf("P5: %w", err)
	}
	h.logf("generated %s (%s, %s)", filepath.Base(a.Path), a.Format, formatBytes(a.Bytes))
	ms := []coldMethod{
		h.holdfastSync(ScenarioP5, MethodHoldfastDirect, WriteDirect, images, a),
		h.holdfastSync(ScenarioP5, MethodHoldfastStream, WriteStream, images, a),
	}
	return h.alternate(ctx, ms, p5Rounds)
}

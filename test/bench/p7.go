package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// p7 measures the cold import of a Hauler haul (set.Bundle's images, one
// zstd frame as Hauler writes it) beside that of an OCI .tar.zst of the same
// images, alternating, each on a fresh embedded containerd: what the haul's
// kinds, names and index cost over a plain archive, per GiB. Both are
// generated first and deleted when the group is done.
func (h *harness) p7(ctx context.Context) (err error) {
	dir := filepath.Join(h.work, "p7")
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing P7's archives: %w", rerr))
		}
	}()
	s := h.cfg.Set.Bundle
	zstDir, haulDir := filepath.Join(dir, "zst"), filepath.Join(dir, "haul")
	zst, err := generateOne(ctx, zstDir, "bundle", 0, s, s.Count, fixture.Zstd, h.cfg.ZstdWindow)
	if err != nil {
		return fmt.Errorf("P7: %w", err)
	}
	s.Formats = []fixture.Format{fixture.FormatHaul}
	haul, err := generateOne(ctx, haulDir, "bundle", 0, s, s.Count, fixture.Zstd, h.cfg.ZstdWindow)
	if err != nil {
		return fmt.Errorf("P7: %w", err)
	}
	for _, a := range []Archive{zst, haul} {
		h.logf("generated %s (%s, %s)", filepath.Base(a.Path), a.Format, formatBytes(a.Bytes))
	}
	ms := []coldMethod{
		h.holdfastSync(ScenarioP7, MethodHoldfastZstDirect, WriteDirect, zstDir, zst),
		h.holdfastSync(ScenarioP7, MethodHoldfastHaul, WriteDirect, haulDir, haul),
	}
	return h.alternate(ctx, ms, h.cfg.Rounds)
}

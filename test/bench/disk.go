package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// WriteDurable writes total bytes under dir as streams files of total/streams
// bytes each, one goroutine per file, in writes of 1 MiB − 4 KiB (the floor's
// size), and fsyncs and closes each file at its end: the disk's own durable
// write rate, which no import can beat. dir is created. total must be a
// multiple of streams.
func WriteDurable(ctx context.Context, dir string, total int64, streams int) error {
	if streams < 1 || total < 1 || total%int64(streams) != 0 {
		return fmt.Errorf("writing %d bytes in %d streams: want a positive total divisible by the streams", total, streams)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("writing the disk rate: %w", err)
	}
	per := total / int64(streams)
	errs := make([]error, streams)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() { errs[i] = writeDurableFile(ctx, filepath.Join(dir, fmt.Sprintf("stream-%d", i)), per, byte(i)) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// writeDurableFile writes n bytes to a new file at path and fsyncs it. The
// bytes vary (no filesystem may skip them as zeros).
func writeDurableFile(ctx context.Context, path string, n int64, seed byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("writing the disk rate: %w", err)
	}
	buf := make([]byte, floorChunk)
	for i := range buf {
		buf[i] = byte(i*7) ^ seed | 1
	}
	for left := n; left > 0; {
		if err := ctx.Err(); err != nil {
			f.Close()
			return err
		}
		m := min(left, int64(len(buf)))
		if _, err := f.Write(buf[:m]); err != nil {
			f.Close()
			return fmt.Errorf("writing %s: %w", path, err)
		}
		left -= m
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsyncing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", path, err)
	}
	return nil
}

// diskRate measures WriteDurable of the set's DiskBytes in streams files, in
// the harness process, in the measurement's dir (in the work dir).
func (h *harness) diskRate(method string, streams int) coldMethod {
	total := h.cfg.Set.DiskBytes
	return coldMethod{
		scenario: ScenarioDisk, method: method, bytes: total,
		run: func(ctx context.Context, env coldEnv) (procRun, error) {
			var r procRun
			cpu0 := selfCPU()
			start := time.Now()
			err := WriteDurable(ctx, filepath.Join(env.dir, "disk"), total, streams)
			r.Wall = time.Since(start)
			r.CPU = selfCPU() - cpu0
			return r, err
		},
	}
}

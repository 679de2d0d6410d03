// Package progress draws, on a terminal, the archives a command reads: a line
// per file being read (name, bytes read of its size, rate, ETA) and a total,
// redrawn in place, with the command's log lines written above them.
package progress

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"
)

// Display draws, on a terminal, a line per archive file being read (name,
// bytes read of its size, rate, ETA) and a total line, redrawn in place. Its
// lines are gone once it stops, so that what the command prints afterwards is
// what it prints without a terminal. Log lines written while it draws go
// above its lines. A nil Display draws nothing: every method does nothing on
// it.
type Display struct {
	out   *os.File
	logs  *Log
	total bool // draw the total line

	mu      sync.Mutex
	p       *mpb.Progress
	sum     *mpb.Bar // the total line, once a file is read
	open    map[*mpb.Bar]bool
	size    int64 // bytes of the files opened, or announced
	done    int64 // bytes read, or passed over once a file is closed
	started time.Time
}

// New returns the display for a command's standard error w, or nil when there
// is none to draw: mode (--progress) never, or auto and w no terminal, or w no
// file. total draws the total line; logs is where the command's logger
// writes.
func New(w io.Writer, mode string, total bool, logs *Log) *Display {
	f, ok := w.(*os.File)
	if !ok || mode == "never" || (mode == "auto" && !term.IsTerminal(int(f.Fd()))) {
		return nil
	}
	return &Display{out: f, logs: logs, total: total, started: time.Now()}
}

// Announce adds the sizes of the files among paths to the total, for a
// command that knows them before it starts, and returns the bytes announced
// up to each path (see Passed).
func (d *Display) Announce(paths []string) []int64 {
	upTo := make([]int64, len(paths))
	if d == nil {
		return upTo
	}
	for i, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			d.size += fi.Size()
		}
		upTo[i] = d.size
	}
	return upTo
}

// Passed counts the first n announced bytes as done: those of the paths
// handled so far, read or not (unchanged, or failed before reading).
func (d *Display) Passed(n int64) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.done = max(d.done, n)
}

// Hook is the agent's progress hook (pass.Progress): nil when nothing is
// drawn.
func (d *Display) Hook() func(path string, size int64, r io.ReadCloser) io.ReadCloser {
	if d == nil {
		return nil
	}
	return d.reader
}

// Start begins drawing; Stop ends it. A command may draw several times, and
// print between: the total goes on where it was.
func (d *Display) Start() {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// Drawn as on a terminal also for --progress=always to a file or pipe.
	d.p = mpb.New(mpb.WithOutput(d.out), mpb.ForceTTY(), mpb.WithAutoRefresh(), mpb.WithRefreshRate(150*time.Millisecond))
	d.open = map[*mpb.Bar]bool{}
	d.sum = nil
	d.logs.to(d.p)
}

// Stop removes the lines drawn and waits until they are gone from the screen.
func (d *Display) Stop() {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.logs.to(nil)
	for b := range d.open {
		b.Abort(true)
	}
	if d.sum != nil {
		d.sum.Abort(true)
	}
	p := d.p
	d.mu.Unlock()
	p.Wait()
}

// reader is the hook: it draws the file's line while it is read.
func (d *Display) reader(path string, size int64, r io.ReadCloser) io.ReadCloser {
	d.mu.Lock()
	defer d.mu.Unlock()
	bar := d.p.AddBar(size, append(decorators(filepath.Base(path), time.Now()), mpb.BarRemoveOnComplete())...)
	d.open[bar] = true
	if d.total {
		if d.done+size > d.size {
			d.size = d.done + size
		}
		if d.sum == nil {
			// Made with no total, the line never completes on its own:
			// more files may come. Its total is then set as they open.
			d.sum = d.p.AddBar(0, append(decorators("total", d.started), mpb.BarPriority(math.MaxInt))...)
			d.sum.SetCurrent(d.done)
		}
		d.sum.SetTotal(d.size, false)
	}
	return &fileReader{r: r, d: d, bar: bar, size: size}
}

// decorators make a line: name, bytes read of the total, the bar, the
// average rate since start and the time left at that rate.
func decorators(name string, start time.Time) []mpb.BarOption {
	return []mpb.BarOption{
		mpb.PrependDecorators(decor.Name(name, decor.WCSyncSpaceR),
			decor.Counters(decor.SizeB1024(0), "% .1f / % .1f", decor.WCSyncSpace)),
		mpb.AppendDecorators(
			decor.Any(func(s decor.Statistics) string { return rate(s.Current, start) }, decor.WCSyncSpace),
			decor.Any(func(s decor.Statistics) string { return "ETA " + eta(s, start) }, decor.WCSyncSpace)),
	}
}

// rate is n bytes over the time since start, per second; it stays shown
// once a line completes.
func rate(n int64, start time.Time) string {
	el := time.Since(start).Seconds()
	if el <= 0 {
		return ""
	}
	return fmt.Sprintf("% .1f/s", decor.SizeB1024(float64(n)/el))
}

// eta is the time left to read the rest at the average rate since start.
func eta(s decor.Statistics, start time.Time) string {
	switch {
	case s.Total > 0 && s.Current >= s.Total:
		return "0s"
	case s.Current <= 0 || s.Total <= 0:
		return "-"
	}
	left := time.Duration(float64(time.Since(start)) * float64(s.Total-s.Current) / float64(s.Current))
	return left.Round(time.Second).String()
}

// fileReader counts the bytes read from one archive file.
type fileReader struct {
	r    io.ReadCloser
	d    *Display
	bar  *mpb.Bar
	size int64
	read int64
	once sync.Once
}

func (r *fileReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.read += int64(n)
	r.bar.IncrBy(n)
	r.d.mu.Lock()
	r.d.done += int64(n)
	if r.d.sum != nil {
		r.d.sum.IncrBy(n)
	}
	r.d.mu.Unlock()
	return n, err
}

// Close ends the file's line; what was not read of it (a failed import, or a
// format that stops before the end) counts as done in the total.
func (r *fileReader) Close() error {
	r.once.Do(func() {
		r.d.mu.Lock()
		defer r.d.mu.Unlock()
		delete(r.d.open, r.bar)
		r.bar.Abort(true)
		if rest := r.size - r.read; rest > 0 {
			r.d.done += rest
			if r.d.sum != nil {
				r.d.sum.IncrInt64(rest)
			}
		}
	})
	return r.r.Close()
}

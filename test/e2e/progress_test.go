package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/holdfast-project/holdfast/internal/fixture"
)

// progSummary is the one line sync prints at the end, as it is without a terminal.
var progSummary = regexp.MustCompile(`sync: \d+ imported, \d+ unchanged, \d+ healed, \d+ unpinned, \d+ failed; \d+ images pinned, \d+ released, \d+ drift, \d+ conflicts; [0-9.]+ [KMGTPE]?i?B read in \S+`)

// TestSyncDrawsProgressOnATerminal runs holdfast sync on a terminal: it draws
// a line per archive it reads (name, bytes read of the file's size, rate),
// then leaves the summary lines it prints without a terminal. With its output
// going to pipes, the same command prints only the summary: no carriage
// returns, no escape sequences.
func TestSyncDrawsProgressOnATerminal(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	app := build(t, fixture.ImageSpec{Names: []string{"e2e.local/progress/app:1"}})
	writeDockerSave(t, filepath.Join(imagesDir, "progress-app.tar"), app)

	out, code := progRunOnTerminal(t, "sync", "--address", d.Address, "--data-dir", dataDir, "--images", imagesDir)
	if code != 0 {
		t.Fatalf("sync on a terminal: exit %d, output:\n%q", code, out)
	}
	t.Logf("terminal output: %q", out)
	line := regexp.MustCompile(`progress-app\.tar\s+[0-9.]+ [KMG]?i?B / [0-9.]+ [KMG]?i?B .*[0-9.]+ [KMG]?i?B/s`)
	if !line.MatchString(out) {
		t.Errorf("no progress line for progress-app.tar (name, bytes read of its size, rate) in the terminal output:\n%q", out)
	}
	if !regexp.MustCompile(`total\s+[0-9.]+ [KMG]?i?B / [0-9.]+ [KMG]?i?B .*[0-9.]+ [KMG]?i?B/s`).MatchString(out) {
		t.Errorf("no total line in the terminal output:\n%q", out)
	}
	// What is left at the end is the summary line, after the last
	// redrawing: the progress lines are gone from the screen.
	last := out[strings.LastIndex(out, "\x1b[")+1:]
	if i := strings.Index(last, "sync: "); i < 0 {
		t.Errorf("the terminal output does not end with the summary line: after the last escape sequence comes %q", last)
	} else if end := last[i:]; !progSummary.MatchString(end) || !strings.HasSuffix(end, "\r\n") || strings.Count(end, "\n") != 1 {
		t.Errorf("the terminal output ends with %q, want the summary line alone", end)
	}
	if !strings.Contains(out, "1 imported") {
		t.Errorf("sync on a terminal did not import the archive:\n%q", out)
	}

	// Without a terminal: exactly the summary line, nothing drawn.
	writeDockerSave(t, filepath.Join(imagesDir, "progress-other.tar"), build(t, fixture.ImageSpec{Names: []string{"e2e.local/progress/other:1"}}))
	res := d.sync(t, dataDir, imagesDir)
	if res.Code != 0 {
		t.Fatalf("sync to pipes: exit %d\nstdout: %s\nstderr: %s", res.Code, res.Stdout, res.Stderr)
	}
	if !regexp.MustCompile(`^`+progSummary.String()+`\n$`).MatchString(res.Stdout) || !strings.Contains(res.Stdout, "sync: 1 imported, 1 unchanged,") {
		t.Errorf("sync to pipes printed %q, want the summary line alone (1 imported, 1 unchanged)", res.Stdout)
	}
	for name, s := range map[string]string{"stdout": res.Stdout, "stderr": res.Stderr} {
		if strings.ContainsAny(s, "\r\x1b") {
			t.Errorf("sync to pipes wrote a carriage return or an escape sequence to %s: %q", name, s)
		}
		if strings.Contains(s, "progress-other.tar ") && strings.Contains(s, "/s") {
			t.Errorf("sync to pipes drew a progress line on %s: %q", name, s)
		}
	}
}

// progRunOnTerminal runs holdfast with args, its standard output and error
// on a new pseudo-terminal, and returns all it wrote there and its exit code.
func progRunOnTerminal(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("opening a pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 160}); err != nil {
		t.Fatalf("sizing the pseudo-terminal: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, holdfastBin, args...)
	cmd.Stdout, cmd.Stderr = tty, tty
	cmd.Env = append(os.Environ(), "TERM=xterm")
	if err := cmd.Start(); err != nil {
		tty.Close()
		t.Fatalf("starting holdfast %v: %v", args, err)
	}
	tty.Close() // the child holds it now: reads end once it exits
	var out bytes.Buffer
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(&out, ptmx)
		copied <- err
	}()
	werr := cmd.Wait()
	// Linux reports the end of a pseudo-terminal whose other side is closed as EIO.
	if err := <-copied; err != nil && !errors.Is(err, syscall.EIO) {
		t.Fatalf("reading the pseudo-terminal: %v", err)
	}
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(werr, &ee):
		code = ee.ExitCode()
	case werr != nil:
		t.Fatalf("running holdfast %v: %v", args, werr)
	}
	return out.String(), code
}

// TestImportDrawsProgressOnATerminal runs holdfast import of two archives on
// a terminal: it draws a line per archive and a total, then leaves exactly
// the lines it prints without a terminal. To pipes it prints only those.
func TestImportDrawsProgressOnATerminal(t *testing.T) {
	d, imagesDir, dataDir := embeddedScene(t)
	one := filepath.Join(imagesDir, "progress-one.tar")
	two := filepath.Join(imagesDir, "progress-two.tar")
	three := filepath.Join(imagesDir, "progress-three.tar")
	writeDockerSave(t, one, build(t, fixture.ImageSpec{Names: []string{"e2e.local/progress/one:1"}}))
	writeDockerSave(t, two, build(t, fixture.ImageSpec{Names: []string{"e2e.local/progress/two:1"}}))
	writeDockerSave(t, three, build(t, fixture.ImageSpec{Names: []string{"e2e.local/progress/three:1"}}))
	imported := func(path string) string {
		return regexp.QuoteMeta(path) + `: imported and kept, \d+ images, \d+ blobs written, \d+ present, [0-9.]+ [KMGTPE]?i?B read \(lease holdfast/[^)]+\)`
	}

	out, code := progRunOnTerminal(t, "import", "--address", d.Address, "--data-dir", dataDir, one, two)
	if code != 0 {
		t.Fatalf("import on a terminal: exit %d, output:\n%q", code, out)
	}
	t.Logf("terminal output: %q", out)
	for _, name := range []string{`progress-one\.tar`, `progress-two\.tar`, `total`} {
		if !regexp.MustCompile(name + `\s+[0-9.]+ [KMG]?i?B / [0-9.]+ [KMG]?i?B .*[0-9.]+ [KMG]?i?B/s`).MatchString(out) {
			t.Errorf("no progress line %s (name, bytes read of the size, rate) in the terminal output:\n%q", name, out)
		}
	}
	if !regexp.MustCompile(`(^|\r\n|\x1b\[J)` + imported(one) + `\r\n`).MatchString(out) {
		t.Errorf("the terminal output lacks the line of %s as printed without a terminal:\n%q", one, out)
	}
	last := out[strings.LastIndex(out, "\x1b[J")+len("\x1b[J"):]
	if !regexp.MustCompile(`^` + imported(two) + `\r\n$`).MatchString(last) {
		t.Errorf("the terminal output ends with %q, want the line of %s alone", last, two)
	}

	// Without a terminal: exactly the lines, nothing drawn.
	res := holdfast(t, "import", "--address", d.Address, "--data-dir", dataDir, three, one)
	if res.Code != 0 {
		t.Fatalf("import to pipes: exit %d\nstdout: %s\nstderr: %s", res.Code, res.Stdout, res.Stderr)
	}
	want := `^` + imported(three) + `\n` + regexp.QuoteMeta(one) + `: unchanged, \d+ images kept \(lease holdfast/[^)]+\)\n$`
	if !regexp.MustCompile(want).MatchString(res.Stdout) {
		t.Errorf("import to pipes printed %q, want the line of each path alone", res.Stdout)
	}
	for name, s := range map[string]string{"stdout": res.Stdout, "stderr": res.Stderr} {
		if strings.ContainsAny(s, "\r\x1b") {
			t.Errorf("import to pipes wrote a carriage return or an escape sequence to %s: %q", name, s)
		}
	}
}

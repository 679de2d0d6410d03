package progress

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

// terminal is a pseudo-terminal whose output a test reads as it comes.
type terminal struct {
	mu  sync.Mutex
	out bytes.Buffer
}

func (tm *terminal) String() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.out.String()
}

// waitFor waits until the terminal shows want; the deadline is only there so
// that a broken display fails rather than hangs.
func (tm *terminal) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(tm.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the terminal never showed %q; it shows:\n%q", want, tm.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestProgressRedrawsInPlaceAndLeavesNothing draws a file being read on a
// pseudo-terminal: its line shows the bytes read of its size while it is
// read, a log line written meanwhile goes above the lines, and once the
// display stops what is printed next is all that is left after the last
// redrawing.
func TestProgressRedrawsInPlaceAndLeavesNothing(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 30, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	tm := &terminal{}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			tm.mu.Lock()
			tm.out.Write(buf[:n])
			tm.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()

	logs := NewLog(tty)
	d := &Display{out: tty, logs: logs, total: true, started: time.Now()}
	d.Start()
	pr, pw := io.Pipe()
	r := d.reader("/images/app.tar", 2048, pr)
	read := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, r)
		read <- err
	}()
	if _, err := pw.Write(make([]byte, 1024)); err != nil {
		t.Fatal(err)
	}
	tm.waitFor(t, "app.tar  1.0 KiB / 2.0 KiB")
	tm.waitFor(t, "total    1.0 KiB / 2.0 KiB")
	fmt.Fprintln(logs, "level=INFO msg=logged while drawing")
	tm.waitFor(t, "logged while drawing")
	pw.Close()
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	r.Close()
	d.Stop()
	fmt.Fprintln(logs, "after")
	fmt.Fprintln(tty, "summary")
	tm.waitFor(t, "summary\r\n")

	out := tm.String()
	if !strings.Contains(out, "\x1b[") {
		t.Errorf("nothing was redrawn in place: %q", out)
	}
	if i, j := strings.Index(out, "logged while drawing"), strings.LastIndex(out, "app.tar"); i < 0 || j < i {
		t.Errorf("the log line is not above the progress lines: %q", out)
	}
	if last := out[strings.LastIndex(out, "\x1b[J")+len("\x1b[J"):]; last != "after\r\nsummary\r\n" {
		t.Errorf("after the last redrawing the terminal shows %q, want only the lines printed after the display stopped", last)
	}
}

// TestProgressModes: auto draws only on a terminal, never draws nowhere,
// always draws also into a pipe.
func TestProgressModes(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	logs := NewLog(pw)
	if d := New(pw, "auto", true, logs); d != nil {
		t.Error("--progress=auto draws into a pipe")
	}
	if d := New(pw, "never", true, logs); d != nil {
		t.Error("--progress=never draws")
	}
	if d := New(&bytes.Buffer{}, "always", true, logs); d != nil {
		t.Error("--progress=always draws into something that is not a file")
	}
	d := New(pw, "always", true, logs)
	if d == nil {
		t.Fatal("--progress=always does not draw into a pipe")
	}
	d.Start()
	r := d.Hook()("/images/piped.tar", 10, io.NopCloser(strings.NewReader("0123456789")))
	if _, err := io.Copy(io.Discard, r); err != nil {
		t.Fatal(err)
	}
	r.Close()
	d.Stop()
	pw.Close()
	out, err := io.ReadAll(pr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "piped.tar") || !strings.Contains(string(out), "10.0 b / 10.0 b") {
		t.Errorf("--progress=always into a pipe wrote %q, want the line of piped.tar", out)
	}
}

package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// stdinOf is the command's standard input, to read an archive from (import -,
// verify -): a terminal is refused rather than waited on, and a pipe is read
// so that ctx ends a read that waits on it (ctxReader).
func stdinOf(ctx context.Context, cmd *cobra.Command) (io.Reader, error) {
	in := cmd.InOrStdin()
	f, ok := in.(*os.File)
	if !ok {
		return in, nil
	}
	if term.IsTerminal(int(f.Fd())) {
		return nil, errors.New("standard input is a terminal: pipe an archive into it, or give a path")
	}
	return ctxReader(ctx, f), nil
}

// ctxReader reads f until ctx ends. A read of a pipe whose writer neither
// writes nor closes blocks in the kernel, where no context reaches, and
// SIGTERM would wait for the command's stop bound: so a pipe is read in
// non-blocking mode through Go's poller, and ctx's end sets a deadline that
// ends the read at once with ctx's error. A regular file is read as it is
// (its reads never wait on a writer).
func ctxReader(ctx context.Context, f *os.File) io.Reader {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&(os.ModeNamedPipe|os.ModeSocket|os.ModeCharDevice) == 0 {
		return f
	}
	// A descriptor of its own, so that f and the new file never close each
	// other's; non-blocking mode is the open file's, shared by both.
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		return f
	}
	syscall.CloseOnExec(fd)
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return f
	}
	pf := os.NewFile(uintptr(fd), f.Name()) // non-blocking: registered with the poller
	if err := pf.SetReadDeadline(time.Time{}); err != nil {
		_ = syscall.SetNonblock(fd, false)
		_ = pf.Close()
		return f
	}
	context.AfterFunc(ctx, func() { _ = pf.SetReadDeadline(time.Now()) })
	return &deadlineReader{ctx: ctx, f: pf}
}

// deadlineReader is ctxReader's reader: reads of f, ctx's error once the
// deadline ctx's end set has passed.
type deadlineReader struct {
	ctx context.Context
	f   *os.File
}

func (r *deadlineReader) Read(p []byte) (int, error) {
	n, err := r.f.Read(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && r.ctx.Err() != nil {
		return n, r.ctx.Err()
	}
	return n, err
}

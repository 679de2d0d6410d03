package exporter

import (
	"bufio"
	"fmt"
	"io"
	"path/filepath"

	"github.com/holdfast-project/holdfast/internal/archive"
	"github.com/holdfast-project/holdfast/internal/files"
)

// Output is where an export writes: standard output, or a hidden temporary
// file beside the archive's path, renamed to it by Commit and removed by
// Abort when Commit did not happen.
type Output struct {
	w       io.Writer
	counted *archive.CountingWriter
	buf     *bufio.Writer
	file    *files.Pending
	done    bool
}

// CreateOutput opens the output of an export to path, or to stdout when
// path is "-".
func CreateOutput(path string, stdout io.Writer) (*Output, error) {
	if path == "-" {
		c := &archive.CountingWriter{W: stdout}
		buf := bufio.NewWriterSize(c, 1<<20)
		return &Output{w: buf, counted: c, buf: buf}, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	f, err := files.Create(abs)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	c := &archive.CountingWriter{W: f}
	buf := bufio.NewWriterSize(c, 1<<20)
	return &Output{w: buf, counted: c, buf: buf, file: f}, nil
}

// Write writes to the output, buffered.
func (e *Output) Write(p []byte) (int, error) { return e.w.Write(p) }

// Commit makes the written file durable and gives it its name.
func (e *Output) Commit() error {
	if err := e.buf.Flush(); err != nil {
		return err
	}
	e.done = true
	if e.file == nil {
		return nil
	}
	return e.file.Commit(0o644)
}

// Abort removes the temporary file unless Commit renamed it.
func (e *Output) Abort() {
	if e.done || e.file == nil {
		return
	}
	e.file.Abort()
}

// Size is the bytes written.
func (e *Output) Size() int64 { return e.counted.N }

package progress

import (
	"io"
	"sync"
)

// Log is where a command's logger writes: standard error, or above the lines
// of a Display while one draws.
type Log struct {
	mu  sync.Mutex
	w   io.Writer
	via io.Writer
}

// NewLog returns the log writer for standard error w.
func NewLog(w io.Writer) *Log {
	return &Log{w: w}
}

// Out is the standard error it writes to when no display draws.
func (l *Log) Out() io.Writer {
	return l.w
}

func (l *Log) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.via != nil {
		return l.via.Write(b)
	}
	return l.w.Write(b)
}

func (l *Log) to(via io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.via = via
}

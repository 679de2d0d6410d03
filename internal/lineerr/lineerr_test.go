package lineerr

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestCause(t *testing.T) {
	_, err := os.Open(filepath.Join(t.TempDir(), "absent"))
	if got := Cause(err); !errors.Is(got, fs.ErrNotExist) || got.Error() != "no such file or directory" {
		t.Errorf("Cause(%v) = %v, want the bare cause", err, got)
	}
	plain := errors.New("plain")
	if got := Cause(plain); got != plain {
		t.Errorf("Cause(plain) = %v", got)
	}
	e := Error{Path: "/images/app.txt", Line: 3, Err: plain}
	if e.Error() != "/images/app.txt:3: plain" || !errors.Is(e, plain) {
		t.Errorf("Error = %q", e.Error())
	}
}

package files

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadAll(t *testing.T) {
	for _, c := range []struct {
		in    string
		limit int64
		want  string
		err   error
	}{
		{"", 0, "", nil},
		{"abc", 3, "abc", nil},
		{"abcd", 3, "", ErrTooLarge},
		{"a", 0, "", ErrTooLarge},
	} {
		got, err := ReadAll(strings.NewReader(c.in), c.limit)
		if string(got) != c.want || !errors.Is(err, c.err) {
			t.Errorf("ReadAll(%q, %d) = %q, %v; want %q, %v", c.in, c.limit, got, err, c.want, c.err)
		}
	}
	if _, err := ReadAll(io.MultiReader(strings.NewReader("ab"), failing{}), 10); err == nil || errors.Is(err, ErrTooLarge) {
		t.Errorf("a failing read: %v; want its error", err)
	}
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

package runtime

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"syscall"
)

// ErrNoSpace is wrapped by an import's error when the content store's
// filesystem has (or would have) too little space left: the import was
// refused before writing, or the store ran out of space while writing.
var ErrNoSpace = errors.New("not enough disk space")

// NoSpace marks err as ErrNoSpace when it says a disk ran out of space while
// writing: containerd's errors carry the system's text, not the errno.
func NoSpace(err error) error {
	if err == nil || errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), syscall.ENOSPC.Error()) {
		return err
	}
	return fmt.Errorf("%w: containerd's content store has no space left: %w", ErrNoSpace, err)
}

// MinFree is how much of the content store's filesystem an import must leave
// free: a number of bytes, or a percentage of the filesystem's size. The zero
// value is the default: 5 % of the filesystem or 1 GiB, whichever is smaller.
type MinFree struct {
	Bytes   int64
	Percent float64 // used when set: 0 < Percent <= 100
	Set     bool    // Bytes or Percent was given; otherwise the default applies
}

// defaultMinFreeBytes caps the default: 5 % of a large disk is more than an
// import needs kept free.
const defaultMinFreeBytes = 1 << 30

// Of returns the bytes to keep free on a filesystem of total bytes.
func (m MinFree) Of(total int64) int64 {
	switch {
	case !m.Set:
		return min(total/20, defaultMinFreeBytes)
	case m.Percent > 0:
		return int64(float64(total) * m.Percent / 100)
	default:
		return m.Bytes
	}
}

// String is the flag's form of m.
func (m MinFree) String() string {
	switch {
	case !m.Set:
		return "5% (at most 1GiB)"
	case m.Percent > 0:
		return strconv.FormatFloat(m.Percent, 'f', -1, 64) + "%"
	default:
		return strconv.FormatInt(m.Bytes, 10)
	}
}

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	// Longest suffixes first, so that "KiB" is not read as "B".
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// ParseMinFree reads a byte size ("0", "512MiB", "2GiB", "1.5G", "100MB") or
// a percentage of the filesystem ("5%").
func ParseMinFree(s string) (MinFree, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "" {
		return MinFree{}, fmt.Errorf("min free %q: empty", s)
	}
	if p, ok := strings.CutSuffix(t, "%"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || math.IsNaN(v) || v < 0 || v > 100 {
			return MinFree{}, fmt.Errorf("min free %q: want a percentage from 0%% to 100%%", s)
		}
		if v == 0 {
			return MinFree{Set: true}, nil
		}
		return MinFree{Percent: v, Set: true}, nil
	}
	mult := int64(1)
	for _, u := range sizeUnits {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || v < 0 || v*float64(mult) >= math.MaxInt64 {
		return MinFree{}, fmt.Errorf("min free %q: want a size such as 2GiB or 500MB, or a percentage such as 5%%", s)
	}
	return MinFree{Bytes: int64(v * float64(mult)), Set: true}, nil
}

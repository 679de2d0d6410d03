package runtime

import "testing"

func TestParseMinFree(t *testing.T) {
	for _, c := range []struct {
		in   string
		want MinFree
	}{
		{"0", MinFree{Set: true}},
		{"0%", MinFree{Set: true}},
		{"5%", MinFree{Percent: 5, Set: true}},
		{" 12.5 % ", MinFree{Percent: 12.5, Set: true}},
		{"100%", MinFree{Percent: 100, Set: true}},
		{"1024", MinFree{Bytes: 1024, Set: true}},
		{"2GiB", MinFree{Bytes: 2 << 30, Set: true}},
		{"2gib", MinFree{Bytes: 2 << 30, Set: true}},
		{"2G", MinFree{Bytes: 2 << 30, Set: true}},
		{"1.5GiB", MinFree{Bytes: 3 << 29, Set: true}},
		{"500MB", MinFree{Bytes: 500e6, Set: true}},
		{"512 MiB", MinFree{Bytes: 512 << 20, Set: true}},
		{"64k", MinFree{Bytes: 64 << 10, Set: true}},
		{"10B", MinFree{Bytes: 10, Set: true}},
	} {
		got, err := ParseMinFree(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseMinFree(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "%", "-1", "-5%", "101%", "5%%", "GiB", "2XB", "1e30GiB", "NaN", "NaN%", "two"} {
		if got, err := ParseMinFree(bad); err == nil {
			t.Errorf("ParseMinFree(%q) = %+v; want an error", bad, got)
		}
	}
}

func TestMinFreeOf(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct {
		m     MinFree
		total int64
		want  int64
	}{
		{MinFree{}, 64 << 20, 64 << 20 / 20}, // default: 5 % of a small filesystem
		{MinFree{}, 10 * gib, 512 << 20},     // 5 % of 10 GiB
		{MinFree{}, 20 * gib, gib},           // the two agree
		{MinFree{}, 500 * gib, gib},          // 1 GiB of a large one
		{MinFree{Set: true}, 500 * gib, 0},
		{MinFree{Percent: 10, Set: true}, 200 << 20, 20 << 20},
		{MinFree{Bytes: 3 << 20, Set: true}, 500 * gib, 3 << 20},
	} {
		if got := c.m.Of(c.total); got != c.want {
			t.Errorf("%+v.Of(%d) = %d; want %d", c.m, c.total, got, c.want)
		}
	}
}

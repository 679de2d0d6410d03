package units

import "testing"

func TestBytes(t *testing.T) {
	for _, c := range []struct {
		n            int64
		short, exact string
	}{
		{0, "0 B", "0 bytes"},
		{1023, "1023 B", "1023 bytes"},
		{1024, "1.0 KiB", "1.0 KiB (1024 bytes)"},
		{80 << 20, "80.0 MiB", "80.0 MiB (83886080 bytes)"},
		{3 << 40, "3.0 TiB", "3.0 TiB (3298534883328 bytes)"},
		{1 << 62, "4.0 EiB", "4.0 EiB (4611686018427387904 bytes)"},
	} {
		if got := Bytes(c.n); got != c.short {
			t.Errorf("Bytes(%d) = %q, want %q", c.n, got, c.short)
		}
		if got := BytesExact(c.n); got != c.exact {
			t.Errorf("BytesExact(%d) = %q, want %q", c.n, got, c.exact)
		}
	}
}

func TestWhole(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want string
	}{
		{0, "0 KiB"},
		{1, "1 KiB"},
		{64 << 10, "64 KiB"},
		{1<<20 - 1, "1024 KiB"},
		{1 << 20, "1 MiB"},
		{1<<20 + 1, "2 MiB"},
		{128 << 20, "128 MiB"},
		{1536 << 20, "1536 MiB"},
		{2 << 30, "2 GiB"},
	} {
		if got := Whole(c.n); got != c.want {
			t.Errorf("Whole(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

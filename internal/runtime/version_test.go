package runtime

import "testing"

func TestCRIHonoursPins(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version string
		want    bool
	}{
		{"1.6.20~ds1", false},
		{"v1.6.24", false},
		{"1.6.25", true},
		{"1.6.33", true},
		{"v1.7.9", false},
		{"1.7.10", true},
		{"v1.7.27", true},
		{"1.5.18", false},
		{"v2.0.0", true},
		{"2.4.2+unknown", true},
		{"v2.4.2", true},
		{"0.9.0", false},
		{"garbage", true},
		{"", true},
	} {
		if got := CRIHonoursPins(tc.version); got != tc.want {
			t.Errorf("CRIHonoursPins(%q) = %v, want %v", tc.version, got, tc.want)
		}
	}
}

func TestExpiresRecords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version string
		want    bool
	}{
		{"1.6.20~ds1", false},
		{"v1.7.35", false},
		{"v2.2.9", true},
		{"v2.3.2-k3s2", true},
		{"2.4.2+unknown", true},
		{"garbage", true},
	} {
		if got := ExpiresRecords(tc.version); got != tc.want {
			t.Errorf("ExpiresRecords(%q) = %v, want %v", tc.version, got, tc.want)
		}
	}
}

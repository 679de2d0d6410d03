package backoff

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	b := New(time.Second, 5*time.Second)
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
	if !b.Started() {
		t.Error("not started after next")
	}
	b.Reset()
	if b.Started() || b.Next() != time.Second {
		t.Error("reset does not start over")
	}
}

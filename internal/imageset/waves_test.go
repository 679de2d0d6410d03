package imageset

import (
	"fmt"
	"maps"
	"math/bits"
	"math/rand"
	"testing"
)

// log2ceil is ⌈log2 n⌉ for n ≥ 1.
func log2ceil(n int) int { return bits.Len(uint(n - 1)) }

// sim spreads one image from one holder among n nodes: each step every
// waiting node asks Place, from the same view taken at the step's start.
// A pull lasts dur(node) steps; a node in fail fails its first pull and then
// sits one step out (its backoff). It returns the steps until every node
// holds the image, and the most pulls at once; served counts the pulls sent
// to each holder.
type sim struct {
	n, m   int
	served map[string]int // holder → the pulls sent to it
	dur    func(node string) int
	fail   map[string]bool
	image  string
}

func (s sim) run(t *testing.T) (steps, peak int) {
	t.Helper()
	names := make([]string, s.n)
	for i := range names {
		names[i] = fmt.Sprintf("node-%04d", i)
	}
	held := map[string]bool{names[0]: true}
	left := map[string]int{}    // pulling: steps left
	backoff := map[string]int{} // sitting out: steps left
	failed := map[string]bool{}
	from := map[string]string{} // holding or pulling → the holder it was sent to
	for steps = 0; len(held) < s.n; steps++ {
		if steps > 4*s.n+10 {
			t.Fatalf("n=%d m=%d: stalled after %d steps with %d of %d holding", s.n, s.m, steps, len(held), s.n)
		}
		var holders, pulling, waiting []string
		for _, n := range names {
			switch {
			case held[n]:
				holders = append(holders, n)
			case left[n] > 0:
				pulling = append(pulling, n)
			case backoff[n] == 0:
				waiting = append(waiting, n)
			}
		}
		m := s.m
		if m <= 0 {
			m = DefaultMaxConcurrent
		}
		// The holders that serve: those sent fewer than MaxServe (all when none), and the pulls on them.
		count := map[string]int{}
		for _, h := range from {
			count[h]++
		}
		serving, busy := 0, 0
		for _, h := range holders {
			if count[h] < MaxServe {
				serving++
			}
		}
		for _, n := range pulling {
			if serving == 0 || count[from[n]] < MaxServe {
				busy++
			}
		}
		if serving == 0 {
			serving = len(holders)
		}
		view := maps.Clone(from)
		started := 0
		sentTo := map[string]string{} // holder → the node this step sent to it
		for _, n := range waiting {
			// MayPull is Place's ok: one call a node keeps the 1,000-node cases quick.
			if h, ok := Place(n, s.image, holders, pulling, waiting, view, s.m); ok {
				left[n] = s.dur(n)
				started++
				if !held[h] {
					t.Fatalf("n=%d step %d: %s may pull but is placed at %q, not a holder", s.n, steps, n, h)
				}
				if sentTo[h] != "" {
					t.Fatalf("n=%d m=%d step %d: %s and %s both sent to %s in one step", s.n, m, steps, sentTo[h], n, h)
				}
				if count[h] >= MaxServe && serving < len(holders) {
					t.Fatalf("n=%d m=%d step %d: %s sent to %s, which served %d, with %d holders serving", s.n, m, steps, n, h, count[h], serving)
				}
				sentTo[h] = n
				from[n] = h
				if s.served != nil {
					s.served[h]++
				}
			}
		}
		if len(left) > m || len(left) > len(holders) {
			t.Fatalf("n=%d m=%d step %d: %d pulling with %d holders", s.n, m, steps, len(left), len(holders))
		}
		if want := min(max(0, min(m-len(pulling), serving-busy)), len(waiting)); started != want {
			t.Fatalf("n=%d m=%d step %d: %d started with %d holders (%d serving), %d pulling (%d on them), %d waiting; want %d",
				s.n, m, steps, started, len(holders), serving, len(pulling), busy, len(waiting), want)
		}
		peak = max(peak, len(left))
		for n := range backoff {
			if backoff[n]--; backoff[n] == 0 {
				delete(backoff, n)
			}
		}
		for n := range left {
			if left[n]--; left[n] > 0 {
				continue
			}
			delete(left, n)
			if s.fail[n] && !failed[n] {
				failed[n] = true
				backoff[n] = 1
				delete(from, n)
				continue
			}
			held[n] = true
		}
	}
	return steps, peak
}

func oneStep(string) int { return 1 }

// TestWavesDoubling: with maxConcurrent ≥ N/2 the waves take exactly the waves the doc of MayPull counts: ⌈log2 N⌉ up
// to N = 8, at most one more up to 1,104 nodes.
func TestWavesDoubling(t *testing.T) {
	ns := []int{}
	for n := 1; n <= 64; n++ {
		ns = append(ns, n)
	}
	ns = append(ns, 100, 127, 128, 129, 257, 1000, 1104)
	worst := 0
	for _, n := range ns {
		for _, m := range []int{(n + 1) / 2, n, 0} {
			if m == 0 && n > 2*DefaultMaxConcurrent || m == n && n > 257 { // the largest once: each takes seconds
				continue
			}
			steps, _ := sim{n: n, m: m, dur: oneStep, image: "example.com/app:1"}.run(t)
			if want := Waves(n, n); steps != want {
				t.Errorf("n=%d m=%d: %d steps, the capped doubling takes %d", n, m, steps, want)
			}
			if bound := log2ceil(n) + 1; steps > bound || n <= 8 && steps != log2ceil(n) {
				t.Errorf("n=%d m=%d: %d steps, want ⌈log2 N⌉ = %d (≤ +1 above 8 nodes)", n, m, steps, log2ceil(n))
			}
			worst = max(worst, steps)
		}
	}
	t.Logf("maxConcurrent ≥ N/2: 1,104 nodes staged in %d waves", worst)
}

// TestWavesBounded: with maxConcurrent m below N/2 the waves meet the capped bound, never more than m pull at once,
// and no holder serves more than MaxServe.
func TestWavesBounded(t *testing.T) {
	cases := []struct{ n, m int }{
		{10, 1}, {100, 1}, {100, 3}, {100, 8}, {300, 8}, {1000, 30}, {1000, DefaultMaxConcurrent}, {1000, 499}, {37, 5},
	}
	for _, c := range cases {
		served := map[string]int{}
		steps, peak := sim{n: c.n, m: c.m, served: served, dur: oneStep, image: "example.com/app:1"}.run(t)
		if b := Waves(c.n, c.m); steps > b {
			t.Errorf("n=%d m=%d: %d steps, want ≤ %d", c.n, c.m, steps, b)
		}
		if peak > c.m {
			t.Errorf("n=%d m=%d: %d pulling at once", c.n, c.m, peak)
		}
		most := 0
		for _, k := range served {
			most = max(most, k)
		}
		// Without the round the first holder by name served every wave (21 copies at 1,000 nodes); without the cap
		// the seed served ⌈log2 N⌉.
		if most > MaxServe {
			t.Errorf("n=%d m=%d: one holder served %d pulls, want ≤ %d", c.n, c.m, most, MaxServe)
		}
		t.Logf("n=%d maxConcurrent=%d: %d waves (bound %d), %d pulling at most, the most one holder served %d", c.n, c.m, steps, Waves(c.n, c.m), peak, most)
	}
}

// TestWavesFailuresAndSlowPulls: pulls of 1 to 3 steps and a tenth of the
// nodes failing once never break the bounds, and every node gets the image.
func TestWavesFailuresAndSlowPulls(t *testing.T) {
	rng := rand.New(rand.NewSource(45))
	for _, c := range []struct{ n, m int }{{50, 25}, {200, 16}, {1000, 64}, {1000, 500}} {
		dur := map[string]int{}
		fail := map[string]bool{}
		for i := range c.n {
			name := fmt.Sprintf("node-%04d", i)
			dur[name] = 1 + rng.Intn(3)
			if i > 0 && rng.Intn(10) == 0 {
				fail[name] = true
			}
		}
		s := sim{n: c.n, m: c.m, dur: func(n string) int { return dur[n] }, fail: fail, image: "example.com/app:2"}
		steps, peak := s.run(t)
		// Each wave lasts at most 3 steps, and the failed pulls add at
		// most as many waves again plus their backoff.
		if b := 3*(2*Waves(c.n, c.m)) + 2; steps > b {
			t.Errorf("n=%d m=%d with %d failing: %d steps, want ≤ %d", c.n, c.m, len(fail), steps, b)
		}
		t.Logf("n=%d m=%d, %d failing once, pulls of 1-3 steps: %d steps, %d pulling at most", c.n, c.m, len(fail), steps, peak)
	}
	// Two nodes failing their first pull, early, delay no other.
	steps, _ := sim{n: 64, m: 32, dur: oneStep, fail: map[string]bool{"node-0001": true, "node-0002": true}, image: "x"}.run(t)
	if steps > log2ceil(64)+3 {
		t.Errorf("two failing nodes: %d steps", steps)
	}
}

func TestMayPull(t *testing.T) {
	all := []string{"a", "b", "c", "d", "e"}
	cases := []struct {
		name                      string
		holders, pulling, waiting []string
		max                       int
		want                      int // how many of the waiting may pull
	}{
		{"no holder, no pull", nil, nil, all, 10, 0},
		{"one holder serves one", []string{"h"}, nil, all, 10, 1},
		{"holders bound", []string{"h", "i", "j"}, nil, all, 10, 3},
		{"maxConcurrent bounds", []string{"h", "i", "j"}, nil, all, 2, 2},
		{"pulling take places", []string{"h", "i", "j"}, []string{"x", "y"}, all, 10, 1},
		{"all busy", []string{"h", "i"}, []string{"x", "y"}, all, 10, 0},
		{"a holder pulling again counts as holder", []string{"h", "i"}, []string{"h"}, all, 10, 2},
		{"default maxConcurrent", many("h", 100), nil, many("w", 100), 0, DefaultMaxConcurrent},
		{"fewer waiting than places", many("h", 9), nil, all, 10, 5},
	}
	for _, c := range cases {
		got := 0
		for _, n := range c.waiting {
			if MayPull(n, "img", c.holders, c.pulling, c.waiting, nil, c.max) {
				got++
			}
		}
		if got != c.want {
			t.Errorf("%s: %d may pull, want %d", c.name, got, c.want)
		}
	}
	if MayPull("h", "img", []string{"h"}, nil, []string{"h", "a"}, nil, 1) {
		t.Error("a holder may pull its own image")
	}
	if MayPull("x", "img", []string{"h", "i"}, []string{"x"}, []string{"a"}, nil, 10) {
		t.Error("a node already pulling may start again")
	}
	// A node that does not list itself among the waiting still takes its place.
	first := ""
	for _, n := range all {
		if MayPull(n, "img", []string{"h"}, nil, all, nil, 1) {
			first = n
		}
	}
	if !MayPull(first, "img", []string{"h"}, nil, nil, nil, 1) {
		t.Errorf("%s alone not allowed", first)
	}
	// The order differs between images, so the first places spread.
	firsts := map[string]bool{}
	for i := range 20 {
		for _, n := range all {
			if MayPull(n, fmt.Sprint("img", i), []string{"h"}, nil, all, nil, 1) {
				firsts[n] = true
			}
		}
	}
	if len(firsts) < 3 {
		t.Errorf("20 images went first to only %v", firsts)
	}
}

func many(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	return out
}

package imageset

import (
	"fmt"
	"math/bits"
	"math/rand"
	"testing"
)

// log2ceil is ⌈log2 n⌉ for n ≥ 1.
func log2ceil(n int) int { return bits.Len(uint(n - 1)) }

// waveBound is the most waves the doc of MayPull allows: doubling up to m
// holders, then m more each wave.
func waveBound(n, m int) int {
	if 2*m >= n {
		return log2ceil(n)
	}
	k := log2ceil(m)
	return k + (n-(1<<k)+m-1)/m
}

// sim spreads one image from one holder among n nodes: each step every
// waiting node asks MayPull, from the same view taken at the step's start.
// A pull lasts dur(node) steps; a node in fail fails its first pull and then
// sits one step out (its backoff). It returns the steps until every node
// holds the image, and the most pulls at once.
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
		started := 0
		serving := map[string]string{} // holder → the node this step sent to it
		for _, n := range waiting {
			if MayPull(n, s.image, holders, pulling, waiting, s.m) {
				left[n] = s.dur(n)
				started++
				from, ok := Place(n, s.image, holders, pulling, waiting, s.m)
				if !ok || !held[from] {
					t.Fatalf("n=%d step %d: %s may pull but is placed at %q (%v), not a holder", s.n, steps, n, from, ok)
				}
				if len(pulling) == 0 && serving[from] != "" {
					t.Fatalf("n=%d m=%d step %d: %s and %s both sent to %s with no pull under way", s.n, m, steps, serving[from], n, from)
				}
				serving[from] = n
				if s.served != nil {
					s.served[from]++
				}
			}
		}
		if len(left) > m || len(left) > len(holders) {
			t.Fatalf("n=%d m=%d step %d: %d pulling with %d holders", s.n, m, steps, len(left), len(holders))
		}
		if want := min(max(0, min(m, len(holders))-len(pulling)), len(waiting)); started != want {
			t.Fatalf("n=%d m=%d step %d: %d started with %d holders, %d pulling, %d waiting; want %d",
				s.n, m, steps, started, len(holders), len(pulling), len(waiting), want)
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
				continue
			}
			held[n] = true
		}
	}
	return steps, peak
}

func oneStep(string) int { return 1 }

func TestWavesDoubling(t *testing.T) {
	ns := []int{}
	for n := 1; n <= 64; n++ {
		ns = append(ns, n)
	}
	ns = append(ns, 100, 127, 128, 129, 257, 1000)
	worst := 0
	for _, n := range ns {
		for _, m := range []int{(n + 1) / 2, n, 0} {
			if m == 0 && n > 2*DefaultMaxConcurrent {
				continue
			}
			steps, _ := sim{n: n, m: m, dur: oneStep, image: "example.com/app:1"}.run(t)
			if bound := log2ceil(n) + 1; steps > bound {
				t.Errorf("n=%d m=%d: %d steps, want ≤ ⌈log2 N⌉+1 = %d", n, m, steps, bound)
			}
			if want := log2ceil(n); steps != want {
				t.Errorf("n=%d m=%d: %d steps, doubling takes %d", n, m, steps, want)
			}
			worst = max(worst, steps)
		}
	}
	t.Logf("maxConcurrent ≥ N/2: 1000 nodes staged in %d waves", worst)
}

// TestWavesBounded: with maxConcurrent m below N/2 the waves meet the bound doubling up to m then m a wave, never
// more than m pull at once, and the pulls go round the holders.
func TestWavesBounded(t *testing.T) {
	cases := []struct{ n, m int }{
		{10, 1}, {100, 1}, {100, 3}, {100, 8}, {300, 8}, {1000, 30}, {1000, 64}, {1000, 100}, {1000, 499}, {37, 5},
	}
	for _, c := range cases {
		served := map[string]int{}
		steps, peak := sim{n: c.n, m: c.m, served: served, dur: oneStep, image: "example.com/app:1"}.run(t)
		if b := waveBound(c.n, c.m); steps > b {
			t.Errorf("n=%d m=%d: %d steps, want ≤ %d", c.n, c.m, steps, b)
		}
		if peak > c.m {
			t.Errorf("n=%d m=%d: %d pulling at once", c.n, c.m, peak)
		}
		most := 0
		for _, k := range served {
			most = max(most, k)
		}
		// The waves go round the holders: none serves many more copies than a doubling from one seed asks of
		// the seed (without the round, the first holder by name served every wave: 21 copies at 1,000 nodes).
		if most > log2ceil(c.n)+1 {
			t.Errorf("n=%d m=%d: one holder served %d pulls, want ≤ ⌈log2 N⌉+1 = %d", c.n, c.m, most, log2ceil(c.n)+1)
		}
		t.Logf("n=%d maxConcurrent=%d: %d waves (bound %d), %d pulling at most, the most one holder served %d", c.n, c.m, steps, waveBound(c.n, c.m), peak, most)
	}
	if steps, _ := (sim{n: 1000, m: DefaultMaxConcurrent, dur: oneStep, image: "x"}).run(t); steps > waveBound(1000, DefaultMaxConcurrent) {
		t.Errorf("default: %d steps", steps)
	} else {
		t.Logf("n=1000 default maxConcurrent=%d: %d waves", DefaultMaxConcurrent, steps)
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
		if b := 3*(2*waveBound(c.n, c.m)) + 2; steps > b {
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
			if MayPull(n, "img", c.holders, c.pulling, c.waiting, c.max) {
				got++
			}
		}
		if got != c.want {
			t.Errorf("%s: %d may pull, want %d", c.name, got, c.want)
		}
	}
	if MayPull("h", "img", []string{"h"}, nil, []string{"h", "a"}, 1) {
		t.Error("a holder may pull its own image")
	}
	if MayPull("x", "img", []string{"h", "i"}, []string{"x"}, []string{"a"}, 10) {
		t.Error("a node already pulling may start again")
	}
	// A node that does not list itself among the waiting still takes its place.
	first := ""
	for _, n := range all {
		if MayPull(n, "img", []string{"h"}, nil, all, 1) {
			first = n
		}
	}
	if !MayPull(first, "img", []string{"h"}, nil, nil, 1) {
		t.Errorf("%s alone not allowed", first)
	}
	// The order differs between images, so the first places spread.
	firsts := map[string]bool{}
	for i := range 20 {
		for _, n := range all {
			if MayPull(n, fmt.Sprint("img", i), []string{"h"}, nil, all, 1) {
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

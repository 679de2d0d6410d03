package imageset

import (
	"hash/fnv"
	"maps"
	"slices"
)

// MaxServe is the most pulls of one image the waves send to one holder
// while another holder has served fewer: a node's link gives at most three
// copies of an image to its peers (the seed's, otherwise ⌈log2 N⌉), at the
// cost of a wave now and then (see MayPull).
const MaxServe = 3

// Waves is how many waves bring an image from one holder to all of n
// nodes, pulls of one wave each, at most m pulling at once (m ≤ 0 is
// DefaultMaxConcurrent), as MayPull admits them: each wave adds at most m,
// the nodes left, and those that got the image in the MaxServe waves
// before (the holder counting as got in wave 0).
func Waves(n, m int) int {
	if m <= 0 {
		m = DefaultMaxConcurrent
	}
	got := []int{1} // by wave
	for held := 1; held < n; {
		w := len(got)
		fresh := 0
		for k := max(0, w-MaxServe); k < w; k++ {
			fresh += got[k]
		}
		add := min(m, n-held, fresh)
		got = append(got, add)
		held += add
	}
	return len(got) - 1
}

// MayPull reports whether node may start pulling image now, from what every
// node sees alike: the nodes that hold it, those pulling it, those waiting
// to (node among them or not), and the holder each node that pulls or
// pulled it was sent to (from, by node; those not known left out). Each
// holder serves at most one new peer at a time and, while others are free,
// MaxServe in all; so at most min(maxConcurrent, serving holders) nodes
// pull at once, and the holders nearly double each wave until
// maxConcurrent binds; the free places go to the waiting nodes first in the
// order of a hash of (node, image), which every node computes alike and
// which spreads the first places of different images over different nodes.
// With no holder no node may pull: the peers are the only source.
// maxConcurrent ≤ 0 is DefaultMaxConcurrent.
//
// With one holder among N nodes, pulls of one wave each and maxConcurrent
// ≥ N/2, the nodes holding the image after w waves are 1, 2, 4, 8, 15, 28,
// 52, … (each wave adds those that got it in the three waves before: a
// holder rests after MaxServe), so every node holds it after ⌈log2 N⌉ waves
// up to N = 8 and at most one wave more up to N = 1,104 (11 waves for
// 1,000 nodes, where doubling takes 10). A smaller maxConcurrent m binds
// once m holders are free: m more each wave.
func MayPull(node, image string, holders, pulling, waiting []string, from map[string]string, maxConcurrent int) bool {
	_, ok := Place(node, image, holders, pulling, waiting, from, maxConcurrent)
	return ok
}

// Place is MayPull, and the holder node should fetch image from when it
// may: its place among the pulls now (those under way first, then the
// waiting nodes before it in the order) taken round the holders that serve
// (sorted by name), so that the pulls of one wave go to different holders. A
// peer mirror left to choose sends most of a wave to the one node it found
// first; with each puller sent to its own holder, each serves one at a time.
func Place(node, image string, holders, pulling, waiting []string, from map[string]string, maxConcurrent int) (holder string, ok bool) {
	has := set(holders)
	if has[node] {
		return "", false
	}
	var pullers []string // pulling, not holding
	for n := range set(pulling) {
		if n == node {
			return "", false
		}
		if !has[n] {
			pullers = append(pullers, n)
		}
	}
	var others []string // waiting, neither holding nor pulling
	isBusy := set(pulling)
	for n := range set(waiting) {
		if n != node && !has[n] && !isBusy[n] {
			others = append(others, n)
		}
	}
	hi := hash(image)
	ranks := make([]uint64, len(others))
	for i, n := range others {
		ranks[i] = mix(hash(n), hi)
	}
	served := map[string]string{}
	for n, h := range from {
		if h != n && (has[n] || isBusy[n]) {
			served[n] = h
		}
	}
	serving, busy := servers(slices.Sorted(maps.Keys(has)), pullers, served)
	return place(node, mix(hash(node), hi), serving, busy, len(pullers), others, ranks, maxConcurrent)
}

// servers are the holders (sorted by name) that serve the next pulls:
// those the waves sent fewer than MaxServe pulls to (from: each node that
// holds or pulls the image → the holder it was sent to), all of them when
// none did; and how many of the pulls under way (pulling: none of them a
// holder) are on those holders or on one not known.
func servers(holders, pulling []string, from map[string]string) (serving []string, busy int) {
	if len(from) == 0 {
		return holders, len(pulling)
	}
	count := map[string]int{}
	for _, h := range from {
		count[h]++
	}
	rested := map[string]bool{}
	for _, h := range holders {
		if count[h] >= MaxServe {
			rested[h] = true
		} else {
			serving = append(serving, h)
		}
	}
	if len(serving) == 0 {
		return holders, len(pulling)
	}
	for _, n := range pulling {
		if !rested[from[n]] {
			busy++
		}
	}
	return serving, busy
}

// place is Place for node of rank mine, given the holders that serve
// sorted by name, how many nodes pull from them (busy) and in all
// (pulling; none of them holders), and the other waiting nodes with their
// ranks (neither holders, pulling nor node).
func place(node string, mine uint64, holders []string, busy, pulling int, others []string, ranks []uint64, maxConcurrent int) (string, bool) {
	if maxConcurrent <= 0 {
		maxConcurrent = DefaultMaxConcurrent
	}
	free := min(maxConcurrent-pulling, len(holders)-busy)
	if free <= 0 {
		return "", false
	}
	ahead := 0 // waiting nodes before node in the order
	for i, r := range ranks {
		if r < mine || (r == mine && others[i] < node) {
			ahead++
		}
	}
	if ahead >= free {
		return "", false
	}
	// The places start at the count of the nodes waiting, which every node
	// sees alike and which falls by the pulls of each wave: the waves go
	// round all the holders instead of always to the first by name.
	return holders[(len(others)+1+busy+ahead)%len(holders)], true
}

// A node's rank places it in the order of the nodes waiting for an image
// (then by name): mix of the FNV-1a hashes of both, by SplitMix64's
// finalizer, so that images differing in one byte order the nodes
// differently; each name is hashed once however many pairs it is in.

func hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

func mix(node, image uint64) uint64 {
	x := node ^ (image*0x9e3779b97f4a7c15 + 0x632be59bd9b4e019)
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func set(s []string) map[string]bool {
	m := make(map[string]bool, len(s))
	for _, v := range s {
		m[v] = true
	}
	return m
}

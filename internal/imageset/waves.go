package imageset

import (
	"hash/fnv"
	"maps"
	"slices"
)

// MayPull reports whether node may start pulling image now, from what every
// node sees alike: the nodes that hold it, those pulling it, and those
// waiting to (node among them or not). Each holder serves at most one new
// peer at a time, so at most min(maxConcurrent, holders) nodes pull at
// once, and the holders double each wave until maxConcurrent binds; the
// free places go to the waiting nodes first in the order of a hash of
// (node, image), which every node computes alike and which spreads the
// first places of different images over different nodes. With no holder
// no node may pull: the peers are the only source. maxConcurrent ≤ 0 is
// DefaultMaxConcurrent.
//
// With one holder among N nodes, pulls of one wave each, every node holds
// the image after at most ⌈log2 N⌉ waves when maxConcurrent ≥ N/2, and
// after at most ⌈log2 m⌉ + ⌈(N − 2^⌈log2 m⌉)/m⌉ waves for a smaller
// maxConcurrent m (doubling up to m holders, then m more each wave).
func MayPull(node, image string, holders, pulling, waiting []string, maxConcurrent int) bool {
	_, ok := Place(node, image, holders, pulling, waiting, maxConcurrent)
	return ok
}

// Place is MayPull, and the holder node should fetch image from when it
// may: its place among the pulls now (those under way first, then the
// waiting nodes before it in the order) taken round the holders sorted by
// name, so that the pulls of one wave go to different holders. A peer
// mirror left to choose sends most of a wave to the one node it found
// first; with each puller sent to its own holder, each serves one at a time.
func Place(node, image string, holders, pulling, waiting []string, maxConcurrent int) (holder string, ok bool) {
	has := set(holders)
	if has[node] {
		return "", false
	}
	busy := 0
	for n := range set(pulling) {
		if n == node {
			return "", false
		}
		if !has[n] {
			busy++
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
	return place(node, mix(hash(node), hi), slices.Sorted(maps.Keys(has)), busy, others, ranks, maxConcurrent)
}

// place is Place for node of rank mine, given the holders sorted by name,
// how many nodes pull (none of them holders), and the other waiting nodes
// with their ranks (neither holders, pulling nor node).
func place(node string, mine uint64, holders []string, busy int, others []string, ranks []uint64, maxConcurrent int) (string, bool) {
	if maxConcurrent <= 0 {
		maxConcurrent = DefaultMaxConcurrent
	}
	free := min(maxConcurrent, len(holders)) - busy
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

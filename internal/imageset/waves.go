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
	if maxConcurrent <= 0 {
		maxConcurrent = DefaultMaxConcurrent
	}
	has := set(holders)
	busy := map[string]bool{}
	for _, n := range pulling {
		if !has[n] {
			busy[n] = true
		}
	}
	if has[node] || busy[node] {
		return "", false
	}
	free := min(maxConcurrent, len(has)) - len(busy)
	if free <= 0 {
		return "", false
	}
	ahead := 0 // waiting nodes before node in the order
	mine := rank(node, image)
	for n := range set(waiting) {
		if n == node || has[n] || busy[n] {
			continue
		}
		if r := rank(n, image); r < mine || (r == mine && n < node) {
			ahead++
		}
	}
	if ahead >= free {
		return "", false
	}
	sorted := slices.Sorted(maps.Keys(has))
	return sorted[(len(busy)+ahead)%len(sorted)], true
}

// rank places node in the order of the nodes waiting for image (then by
// name): FNV-1a of both, mixed by SplitMix64's finalizer so that images
// differing in one byte order the nodes differently.
func rank(node, image string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(node))
	h.Write([]byte{0})
	h.Write([]byte(image))
	x := h.Sum64()
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
